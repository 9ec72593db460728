#!/usr/bin/env bash
# check-layout.sh — the folders of src/ must depend on each other in one direction only.
#
# Usage: tools/check-layout.sh OBJDIR
#   OBJDIR: a build's object folder of the library, e.g. build/CMakeFiles/tlmcore.dir (it holds
#   src/<folder>/*.o). Objects of src/cli (the tlm target's, CMakeFiles/tlm.dir) may be given too as a
#   second OBJDIR: src/cli is the top, so no other folder may reference a symbol it defines.
#
# From the objects' symbol tables (nm): a folder A references folder B when an object of src/A has an
# undefined symbol that an object of src/B defines (global text, data, bss, read-only or weak). Prints,
# for each pair, "A -> B" with the number of symbols and a few of their names; then every cycle: two
# folders that reach each other (directly or through others; a cycle inside one folder is fine).
# The profiler's inject library (libtlm_inject.so) and the tests are not in these objects; an object
# whose source file no longer exists (left in the build folder after a move) is skipped.
# Exit: 0 when there is no cycle, 1 naming each cycle, 2 on bad usage (no objects found).
set -euo pipefail

if [ $# -lt 1 ]; then
    echo "usage: $0 OBJDIR [OBJDIR...]   (e.g. build/CMakeFiles/tlmcore.dir)" >&2
    exit 2
fi
NM=${NM:-nm}
root=$(cd "$(dirname "$0")/.." && pwd) # the sources: an object whose source is gone (stale) is skipped
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

n=0
for dir in "$@"; do
    [ -d "$dir" ] || { echo "check-layout: $dir: not a folder" >&2; exit 2; }
    while IFS= read -r -d '' obj; do
        rel=${obj#"$dir"/}
        case $rel in src/*/*) ;; *) continue ;; esac
        [ -f "$root/${rel%.o}" ] || continue
        folder=${rel#src/}
        folder=${folder%%/*}
        # "<folder> D <symbol>" for definitions, "<folder> U <symbol>" for references
        "$NM" -g "$obj" 2>/dev/null | awk -v f="$folder" '
            NF == 2 && ($1 == "U" || $1 == "w" || $1 == "v") { print f, "U", $2; next }
            NF == 3 && $2 ~ /^[TDBRVWGSCi]$/ { print f, "D", $3 }' >> "$tmp/syms"
        n=$((n + 1))
    done < <(find "$dir" -name '*.o' -print0)
done
if [ "$n" -eq 0 ]; then
    echo "check-layout: no object files under $* (build the tlmcore target first)" >&2
    exit 2
fi

awk '
    $2 == "D" { if (!($3 in owner)) owner[$3] = $1 }
    $2 == "U" { ref[++nref] = $1 SUBSEP $3 }
    { folders[$1] = 1 }
    END {
        for (i = 1; i <= nref; i++) {
            split(ref[i], p, SUBSEP)
            a = p[1]; s = p[2]
            if (!(s in owner)) continue      # libc, BLAS, CUDA, MPI: outside src/
            b = owner[s]
            if (a == b) continue
            key = a SUBSEP b
            if (!((key SUBSEP s) in seen)) {
                seen[key SUBSEP s] = 1
                count[key]++
                if (count[key] <= 3) names[key] = names[key] (count[key] > 1 ? " " : "") s
            }
            edge[a, b] = 1
        }
        nf = 0
        for (f in folders) list[++nf] = f
        # sort the folder names (insertion sort: a dozen of them)
        for (i = 2; i <= nf; i++) { v = list[i]; for (j = i - 1; j >= 1 && list[j] > v; j--) list[j + 1] = list[j]; list[j + 1] = v }
        print "folder dependencies (A -> B: A references a symbol defined in B):"
        for (i = 1; i <= nf; i++)
            for (j = 1; j <= nf; j++) {
                k = list[i] SUBSEP list[j]
                if (k in count)
                    printf "  %-9s -> %-9s %4d  (%s%s)\n", list[i], list[j], count[k], names[k], (count[k] > 3 ? " ..." : "")
            }
        # reachability (Floyd-Warshall over the folders)
        for (i = 1; i <= nf; i++) for (j = 1; j <= nf; j++) reach[list[i], list[j]] = ((list[i], list[j]) in edge)
        for (k = 1; k <= nf; k++) for (i = 1; i <= nf; i++) if (reach[list[i], list[k]])
            for (j = 1; j <= nf; j++) if (reach[list[k], list[j]]) reach[list[i], list[j]] = 1
        bad = 0
        for (i = 1; i <= nf; i++) {
            if (list[i] != "cli" && reach[list[i], "cli"]) {
                printf "check-layout: src/%s references src/cli, the top: nothing may\n", list[i]; bad = 1
            }
            for (j = i + 1; j <= nf; j++)
                if (reach[list[i], list[j]] && reach[list[j], list[i]]) {
                    direct = ((list[i], list[j]) in edge) && ((list[j], list[i]) in edge)
                    printf "check-layout: cycle: src/%s and src/%s reach each other%s\n", list[i], list[j],
                           direct ? " (both directly)" : " (through other folders)"
                    bad = 1
                }
        }
        if (bad) exit 1
        print "check-layout: no cycle among the folders of src/"
    }' "$tmp/syms"
