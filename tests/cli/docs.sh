#!/usr/bin/env bash
# docs.sh — the documentation against the tree: docs/commands.md is what tools/gen-commands-doc.sh
# makes from the --help texts of this tlm; every repository path that README.md and docs/*.md name
# (in backticks, or as a link) exists; neither names a file outside the repository or a tracker number.
source "$(dirname "$0")/lib.bash"

gen=$(bash tools/gen-commands-doc.sh --stdout "$TLM")
if [ "$gen" = "$(cat docs/commands.md)" ]; then check "docs/commands.md is the --help texts" true
else
  check "docs/commands.md is the --help texts (run tools/gen-commands-doc.sh build/tlm)" false
  diff <(echo "$gen") docs/commands.md | head -20
fi

# repository paths named in backticks (outside code blocks) and in links
missing=()
for f in README.md docs/*.md; do
  dir=$(dirname "$f")
  text=$(awk '/^```/ { fenced = !fenced; next } !fenced' "$f")
  while read -r p; do
    case "$p" in src/* | include/* | tests/* | bench/* | tools/* | docs/*) ;; *) continue ;; esac
    case "$p" in *'*'* | *'<'* | *'{'* | *'...'* | *'|'*) continue ;; esac
    [ -e "${p%%:*}" ] || missing+=("$f: \`$p\`")
  done < <(grep -oE '`[^` ]+`' <<<"$text" | tr -d '`')
  while read -r l; do
    case "$l" in http* | '#'* | mailto:*) continue ;; esac
    [ -e "$dir/${l%%#*}" ] || missing+=("$f: link $l")
  done < <(grep -oE '\]\([^) ]+\)' <<<"$text" | sed 's/^](//; s/)$//')
done
check "every path README.md and docs/*.md name exists${missing:+ (missing: ${missing[*]})}" test ${#missing[@]} -eq 0

# no file outside the repository, no tracker numbers
outside=$(grep -rlI 'SPEC[.]md' README.md docs src include tests bench tools || true)
check "no reference to the assignment notes outside the repository${outside:+ (in: $outside)}" test -z "$outside"
numbers=$(grep -rlIE '[Ii]ssues? ?[0-9]+' README.md docs src include tests bench tools || true)
check "no issue numbers${numbers:+ (in: $numbers)}" test -z "$numbers"
finish
