#!/bin/sh
# Unmodified programs using a directory beside a coordinated program: cat and cp of its
# count.json, mv and rm of copies, in a loop until .a.done appears. Errors go to DIR/errors,
# but for two that are no coordination failure: count.json missing (the program moves it away
# and back, and a name looked up meanwhile is not there), and cp's "replaced while being
# copied" (it stats, then opens, and an atomic save replaced the file in between, as on any
# filesystem). Each read is kept (read.N, copy.N) to be checked whole. Prints the rounds made.
cd "$1" || exit 1
n=0
while [ ! -e .a.done ]; do
    cat count.json > read.$n 2>> moved || rm -f read.$n
    if cp count.json snap 2>> moved; then
        mv snap snap2 2>> errors && cat snap2 > copy.$n 2>> errors && rm snap2 2>> errors
    fi
    n=$((n+1))
done
# Anything but those two is an error.
grep -v -e "count.json.*No such file or directory" -e "replaced while being copied" moved >> errors 2>/dev/null
rm -f moved
echo $n
