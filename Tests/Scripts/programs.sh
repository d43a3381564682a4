#!/bin/sh
# Real programs through a coordfs mount, compared with the backing directory.
#   programs.sh MOUNT_DIR BACKING_DIR SCRATCH_DIR
# Prints "ok STEP" per step and "all ok" at the end; stops at the first failure.
set -eu
M=$1 B=$2 S=$3
step() { echo "ok $1"; }
fail() { echo "FAILED $1" >&2; exit 1; }

# A source tree outside the mount, with odd names, links, a sparse file and a big file.
mkdir -p "$S/src/sub dir/deeper"
printf 'hello\n' > "$S/src/a.txt"
printf 'spaces\n' > "$S/src/sub dir/file with spaces"
head -c 3000000 /dev/urandom > "$S/src/sub dir/deeper/big.bin"
ln -s a.txt "$S/src/link-to-a"
ln "$S/src/a.txt" "$S/src/hardlink-a"
truncate -s 50M "$S/src/sparse.img" && printf 'tail' | dd of="$S/src/sparse.img" bs=1 seek=52428000 conv=notrunc 2>/dev/null
chmod 0640 "$S/src/a.txt"

cp -a "$S/src" "$M/copy"
diff -r "$S/src" "$M/copy" || fail "cp -a/diff -r (mount)"
diff -r "$S/src" "$B/copy" || fail "cp -a/diff -r (backing)"
[ "$(stat -c %h "$B/copy/a.txt")" = 2 ] || fail "hard link kept"
[ "$(readlink "$M/copy/link-to-a")" = a.txt ] || fail "symlink kept"
[ "$(stat -c %a "$M/copy/a.txt")" = 640 ] || fail "mode kept"
[ "$(du -k "$B/copy/sparse.img" | cut -f1)" -lt 1024 ] || fail "sparse file stays sparse"
step "cp -a, diff -r, hard links, symlinks, modes, sparse files"

tar -C "$S" -cf "$M/src.tar" src
mkdir "$M/untar" && tar -C "$M/untar" -xf "$M/src.tar"
diff -r "$S/src" "$M/untar/src" || fail "tar"
tar -C "$M" -cf "$S/from-mount.tar" copy && mkdir "$S/untar" && tar -C "$S/untar" -xf "$S/from-mount.tar"
diff -r "$S/src" "$S/untar/copy" || fail "tar out"
step "tar create and extract, in and out"

rsync -a --checksum "$S/src/" "$M/rsynced/"
rsync -a --checksum --dry-run --itemize-changes "$S/src/" "$M/rsynced/" | grep -q . && fail "rsync in left differences"
rsync -a --checksum "$M/rsynced/" "$S/rsync-back/"
diff -r "$S/src" "$S/rsync-back" || fail "rsync out"
step "rsync in and out with checksums"

mkdir "$M/repo" && cd "$M/repo"
git init -q . && git config user.email t@example.com && git config user.name t
cp -a "$S/src/." . && git add -A && git commit -qm one
printf 'more\n' >> a.txt && git commit -qam two
git gc -q && git fsck --full --strict 2>&1 | grep -v '^Checking' | grep -q . && fail "git fsck"
[ "$(git rev-list --count HEAD)" = 2 ] || fail "git history"
cd "$S"
git -C "$B/repo" fsck --full --strict >/dev/null 2>&1 || fail "git fsck on the backing directory"
step "git init, commit, gc, fsck"

sqlite3 "$M/db.sqlite" "PRAGMA journal_mode=WAL; CREATE TABLE t(x INTEGER, y TEXT);" >/dev/null
for i in 1 2 3 4 5; do
  sqlite3 "$M/db.sqlite" "BEGIN; INSERT INTO t SELECT value, hex(randomblob(64)) FROM generate_series(1, 2000); COMMIT;" 2>/dev/null \
    || sqlite3 "$M/db.sqlite" "BEGIN; WITH RECURSIVE c(v) AS (SELECT 1 UNION ALL SELECT v+1 FROM c WHERE v < 2000) INSERT INTO t SELECT v, hex(randomblob(64)) FROM c; COMMIT;"
done
[ "$(sqlite3 "$M/db.sqlite" 'PRAGMA integrity_check;')" = ok ] || fail "sqlite integrity"
[ "$(sqlite3 "$M/db.sqlite" 'SELECT count(*) FROM t;')" = 10000 ] || fail "sqlite rows"
sqlite3 "$M/db.sqlite" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
[ "$(sqlite3 "$B/db.sqlite" 'PRAGMA integrity_check;')" = ok ] || fail "sqlite integrity on the backing directory"
step "sqlite3 transactions and integrity_check"

# Write to a temporary file, then rename over the target, while readers read: every read sees
# one whole version.
printf 'version-0\n%.0s' $(seq 1 2000) > "$M/current.txt"
( for v in 1 2 3 4 5 6 7 8 9 10; do
    printf "version-$v\n%.0s" $(seq 1 2000) > "$M/.current.tmp" && mv "$M/.current.tmp" "$M/current.txt"
  done ) &
writer=$!
torn=0
for r in $(seq 1 60); do
  versions=$(sort -u "$M/current.txt" | wc -l)
  [ "$versions" = 1 ] || torn=$((torn + 1))
done
wait $writer
[ "$torn" = 0 ] || fail "a reader saw a torn file ($torn times)"
[ "$(sort -u "$M/current.txt")" = version-10 ] || fail "the last version won"
step "write-temp-then-rename while readers read"

echo "all ok"
