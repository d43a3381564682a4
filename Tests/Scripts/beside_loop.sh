#!/bin/sh
# Unmodified programs using a directory beside a coordinated program: cat and cp of its
# count.json, mv and rm of copies, in a loop until .a.done appears. Errors go to DIR/errors
# (count.json missing is none: the program moves it away and back, and a name looked up
# meanwhile is not there); each read is kept (read.N, copy.N) to be checked whole. Prints the
# rounds made.
cd "$1" || exit 1
n=0
while [ ! -e .a.done ]; do
    cat count.json > read.$n 2>> moved || rm -f read.$n
    if cp count.json snap 2>> moved; then
        mv snap snap2 2>> errors && cat snap2 > copy.$n 2>> errors && rm snap2 2>> errors
    fi
    n=$((n+1))
done
# Anything but the moved file's absence is an error.
grep -v "count.json.*No such file or directory" moved >> errors 2>/dev/null
rm -f moved
echo $n
