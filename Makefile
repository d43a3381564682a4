# coordfs — `make run` and `make test` set up everything a fresh machine needs.
SWIFT      ?= swift
PACKAGES   := libfuse3-dev liburing-dev fuse3 fio pkg-config rsync sqlite3 git man-db inotify-tools nfs-ganesha nfs-ganesha-vfs libnfs-utils etcd-server etcd-client curl openssl
# Named after what it installs: a new package list installs again.
STAMP      := .build/.setup-done-openssl

DEMO_MNT   := Mounts/run/demo
COORDFS    := .build/debug/coordfs
PREFIX     ?= /usr/local

SOAK_SECONDS ?= 300

.PHONY: all setup io-uring build test lint test-python test-cluster-harness test-cluster-mounts test-hostile man docs install-files fuzz fuzz-run memory-campaign bench bench-walk bench-programs bench-cluster soak soak-versions soak-hostile soak-cluster test-cluster-soak stress-cross run stop install clean

all: build

# Installs the system packages the project needs, once per machine.
setup: $(STAMP)
$(STAMP):
	@missing=""; for p in $(PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@mkdir -p .build && touch $(STAMP)

# FUSE over io_uring (Linux 6.14+) is off until the fuse module's enable_uring is on; it only
# lets a daemon ask for it at mount time. Turned on here when the kernel has it and we may.
io-uring:
	@f=/sys/module/fuse/parameters/enable_uring; if [ -w $$f ] && [ "$$(cat $$f)" != Y ]; then echo Y > $$f; fi; true

build: setup io-uring
	$(SWIFT) build

# Builds once, then runs every suite against that build. The test process and the programs it
# starts coordinate among themselves only (COORDFS_COORDINATION=in-process): no user daemon is
# started or met; the cross-process tests set up a daemon socket of their own. Serially: many tests block threads on
# purpose (a held access, a waiting reader), which in parallel would starve the 2-thread pool
# that async tests need; serially the whole run takes seconds.
# CI shows only the end of a run: a failed run ends with its failures again.
test: setup io-uring
	@$(MAKE) --no-print-directory lint
	$(SWIFT) build --build-tests
	@$(MAKE) --no-print-directory man >/dev/null
	@$(MAKE) --no-print-directory docs
	@$(MAKE) --no-print-directory fuzz-run FUZZ_SECONDS=$(FUZZ_TEST_SECONDS) FUZZ_CORPUS=$$(mktemp -d)
	@# A killed run may have left test mounts behind: cleared first, so they count against nobody.
	@Tests/Scripts/leftover_mounts.sh
	@bash -o pipefail -c 'COORDFS_COORDINATION=in-process $(SWIFT) test --skip-build --no-parallel 2>&1 | tee .build/test.log' || { \
	  echo ""; echo "=== failures (the whole run is in .build/test.log) ==="; \
	  grep -E -A6 "recorded an issue|Exited with|Fatal error|error:" .build/test.log | head -150; \
	  Tests/Scripts/leftover_mounts.sh; exit 1; }
	@Tests/Scripts/leftover_mounts.sh --fail || { echo "a test left a mount behind (named above)"; exit 1; }
	@skipped=$$(grep -cE "Test .* skipped" .build/test.log || true); echo "skipped: $$skipped"; \
	  grep -E "Test .* skipped" .build/test.log | sed 's/^[^A-Za-z]*/  /' || true
	@$(MAKE) --no-print-directory test-python
	@$(MAKE) --no-print-directory test-cluster-harness
	@$(MAKE) --no-print-directory test-cluster-mounts
	@$(MAKE) --no-print-directory test-cluster-soak
	@$(MAKE) --no-print-directory test-hostile

# The code as .swift-format lays it out (120 columns; the toolchain's swift-format). Reformat
# with `swift format -i --configuration .swift-format -r Sources Tests Package.swift`.
lint:
	$(SWIFT) format lint --strict --configuration .swift-format -r Sources Tests Package.swift

# Hosts that share a store, mounted with --cluster: two coordfs hosts over one backing
# directory and a 3-member etcd cluster, in network namespaces of their own.
test-cluster-mounts:
	@python3 Tests/Scripts/cluster_mount_test.py >.build/cluster-mount-test.log 2>&1 || { tail -40 .build/cluster-mount-test.log; exit 1; }
	@if grep -q "skipped" .build/cluster-mount-test.log; then tail -5 .build/cluster-mount-test.log; echo "cluster mounts: skipped"; exit 1; fi
	@echo "cluster mounts: $$(grep -E '^Ran' .build/cluster-mount-test.log | tail -1) OK"

# The harness for hosts that share a store (an etcd cluster and hosts, each in a network
# namespace of its own) works on this machine; a skip (no root, no etcd) fails it here.
test-cluster-harness:
	@python3 Tests/Scripts/cluster_test.py >.build/cluster-test.log 2>&1 || { tail -40 .build/cluster-test.log; exit 1; }
	@if grep -q "skipped" .build/cluster-test.log; then tail -5 .build/cluster-test.log; echo "cluster harness: skipped"; exit 1; fi
	@echo "cluster harness: $$(tail -3 .build/cluster-test.log | grep -E '^Ran') OK"

# The Python package, installed in a fresh venv as a user installs it (pip fetches setuptools
# to build it), and its tests against real mounts. Where pip cannot reach the package index
# the tests run from the source tree instead, and say so.
PYVENV := .build/pyvenv
test-python:
	@rm -rf $(PYVENV) && python3 -m venv $(PYVENV)
	@if $(PYVENV)/bin/pip install -q ./clients/python >.build/pip.log 2>&1; then \
	  echo "python: coordfs installed in $(PYVENV)"; pythonpath=""; \
	else echo "python: NOTE: pip install ./clients/python failed (no package index?), see .build/pip.log; testing the source tree"; \
	  pythonpath=$(CURDIR)/clients/python; fi; \
	cd clients/python/tests && PYTHONPATH=$$pythonpath COORDFS=$(CURDIR)/$(COORDFS) \
	  $(CURDIR)/$(PYVENV)/bin/python -m unittest -v 2>.build-python-tests.log; status=$$?; \
	  tail -12 .build-python-tests.log; rm -f .build-python-tests.log; exit $$status

# The control socket's fuzz target (libFuzzer, with AddressSanitizer): FUZZ_SECONDS of inputs
# grown from the corpus kept in Tests/Fuzz/corpus (which `make fuzz` adds to). A crash, a hang
# of an input past 10 s, a leak or a descriptor not closed fails it. `make test` runs it briefly
# on a copy of the corpus.
FUZZ_SECONDS ?= 600
FUZZ_TEST_SECONDS ?= 30
FUZZ_CORPUS ?= Tests/Fuzz/corpus
FUZZER := .build-fuzz/release/CoordFSFuzz
fuzz: setup
	@$(MAKE) --no-print-directory fuzz-run
fuzz-run:
	$(SWIFT) build -c release --product CoordFSFuzz --scratch-path .build-fuzz \
		-Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library -Xswiftc -DFUZZING
	@mkdir -p $(FUZZ_CORPUS) && [ "$(FUZZ_CORPUS)" = Tests/Fuzz/corpus ] || cp Tests/Fuzz/corpus/* $(FUZZ_CORPUS)/
	@$(FUZZER) $(FUZZ_CORPUS) -max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 > .build/fuzz.log 2>&1 \
		|| { tail -40 .build/fuzz.log; echo "fuzz: failed (the whole run is in .build/fuzz.log)"; exit 1; }
	@echo "fuzz: no crash, hang, leak or open descriptor left in $(FUZZ_SECONDS) s: $$(grep -E '^#[0-9]+[[:space:]]+DONE' .build/fuzz.log | tail -1)"

# A release daemon driven hard through its control socket for MEMORY_SECONDS, in rounds of a
# minute with the fuzz corpus and clients that leave holds, watches and services behind: after
# each round nothing may stay held or presented, descriptors must be back, and memory after the
# last round within MEMORY_MARGIN_KB of where the first round left it.
MEMORY_SECONDS ?= 600
MEMORY_MARGIN_KB ?= 2048
memory-campaign: setup
	$(SWIFT) build -c release --product coordfs
	@dir=$$(mktemp -d); .build/release/coordfs daemon --socket $$dir/campaign.sock & pid=$$!; \
	  trap 'kill $$pid 2>/dev/null; wait $$pid 2>/dev/null; rm -rf $$dir' EXIT; \
	  for i in 1 2 3 4 5 6 7 8 9 10; do [ -S $$dir/campaign.sock ] && break; sleep 0.5; done; \
	  python3 Tests/Scripts/memory_campaign.py $$dir/campaign.sock $$pid $(MEMORY_SECONDS) Tests/Fuzz/corpus 16 60 $(MEMORY_MARGIN_KB)

# The engine's figures, then the filesystem table (native, coordfs on and off, bindfs,
# passthrough_ll, and libfuse's passthrough_hp where PASSTHROUGH_HP names it) with the metadata
# jobs run by BENCH_CLIENTS processes at once as well; BENCH_REPEATS sets the interleaved
# repeats, BENCH_OPTIONS adds options (BENCH_OPTIONS=--quick: smaller files and jobs).
BENCH_REPEATS ?= 3
# bench-programs' rounds: programbench.py's own default (8, 3 with --quick) unless set.
BENCH_ROUNDS ?=
BENCH_CLIENTS ?= 1,2,4,8
BENCH_OPTIONS ?=
# The anchor: passthrough_hp built beside the project as docs/performance.md says (nothing here
# builds it), e.g. make bench PASSTHROUGH_HP=/path/to/passthrough_hp; mounted with
# PASSTHROUGH_HP_OPTIONS (FUSE over io_uring where the kernel offers it). Unset: no such column.
PASSTHROUGH_HP ?=
PASSTHROUGH_HP_OPTIONS ?= -o io_uring
BENCH_ANCHOR = $(if $(PASSTHROUGH_HP),--anchor passthrough_hp=$(PASSTHROUGH_HP) --anchor-options='$(PASSTHROUGH_HP_OPTIONS)')
bench: setup io-uring
	@command -v bindfs >/dev/null || { apt-get install -y -qq bindfs >/dev/null 2>&1 || true; }
	$(SWIFT) build -c release --product CoordFSBench
	$(SWIFT) build -c release --product coordfs
	.build/release/CoordFSBench
	@[ -n "$(PASSTHROUGH_HP)" ] || echo "No passthrough_hp column: PASSTHROUGH_HP=/path/to/passthrough_hp adds it (docs/performance.md)."
	python3 Benchmarks/fsbench.py .build/release/coordfs --repeats $(BENCH_REPEATS) \
		$(if $(BENCH_CLIENTS),--clients $(BENCH_CLIENTS)) $(BENCH_ANCHOR) $(BENCH_OPTIONS)
	@echo "The metadata jobs again, with a file held open on every mount elsewhere: requests pass beside it."
	python3 Benchmarks/fsbench.py .build/release/coordfs --repeats $(BENCH_REPEATS) --engine-busy=elsewhere \
		--coordfs-only --jobs create,stat,unlink
	@echo "And with a file held open in the jobs' own directory: requests about other names pass beside it."
	python3 Benchmarks/fsbench.py .build/release/coordfs --repeats $(BENCH_REPEATS) --engine-busy=beside \
		--coordfs-only --jobs create,stat,unlink
	@echo "How soon a change made behind the mount reaches a watcher in another process."
	python3 Benchmarks/behindbench.py .build/release/coordfs

# The first walk of a 40 000-file tree through a fresh mount: the slowest calls (evictions,
# table growth) against the same walk natively.
bench-walk: setup io-uring
	$(SWIFT) build -c release --product coordfs
	python3 Benchmarks/walkbench.py .build/release/coordfs --repeats $(BENCH_REPEATS)

# How long a host waits for a delegation through etcd (alone, and handed over by another host),
# against a 3-member cluster in network namespaces of its own; then the metadata jobs on a
# mount with --cluster, alone in the cluster, paired with the same build's mount without it.
bench-cluster: setup
	$(SWIFT) build -c release --product CoordFSClusterBench
	$(SWIFT) build -c release --product coordfs
	python3 Benchmarks/clusterbench.py .build/release/CoordFSClusterBench --fsbench .build/release/coordfs

# Real programs (cat, ls -l, find, grep, du, tar, cp in and out; git clone and status, tar x,
# rsync -a, find | xargs stat, rm -rf, make -j of a generated C tree), each a fresh process,
# through mounts made different ways side by side (and passthrough_hp where PASSTHROUGH_HP names
# it), against the backing directory itself, on one fresh ext4 image (root).
bench-programs: setup io-uring
	$(SWIFT) build -c release --product coordfs
	@[ -n "$(PASSTHROUGH_HP)" ] || echo "No passthrough_hp column: PASSTHROUGH_HP=/path/to/passthrough_hp adds it (docs/performance.md)."
	python3 Benchmarks/programbench.py .build/release/coordfs $(if $(BENCH_ROUNDS),--rounds $(BENCH_ROUNDS)) \
		$(BENCH_ANCHOR) $(BENCH_OPTIONS)

# Two copies of an Apple-style program (CoordinatedCounter) at once, STRESS_ROUNDS times outside
# any mount (through a daemon they start) and inside one: every failure, EDEADLK, EBUSY and hang
# is counted, and any fails the target.
STRESS_ROUNDS ?= 20
stress-cross: build
	python3 Tests/Scripts/cross_stress.py $(COORDFS) .build/debug/CoordinatedCounter $(STRESS_ROUNDS)

# The long run (not in CI): fio rounds for SOAK_SECONDS under churn and a presenter, then a summary.
# SOAK_OPTIONS go to the mount (SOAK_OPTIONS=--no-kernel-passthrough soaks the daemon's data path).
soak: build
	python3 Tests/Scripts/soak.py $(COORDFS) $(SOAK_SECONDS) $(SOAK_OPTIONS)

# Hostile users, long (as root): nobody and two throwaway uids (setpriv) hammer a mount shared with
# -o allow_other for HOSTILE_SECONDS (holds, watches, moves, vends, status, opens, renames, unlinks,
# connections, memory up to ENOMEM, presenters doing their own work, a user's own hold freezing a
# shared directory) while root runs fio with crc32c verify, CoordinatedCounter, `coordfs
# coordinate` and every kind of call, each timed. It fails when root waits past the break time,
# fio verifies an error, the daemon's memory passes its share a user, or a directory freezes past
# 1 s (Tests/Scripts/hostile_soak.py says what else). HOSTILE_OPTIONS go to the script
# (--without ATTACKS, --break-time S, --users UIDS, ...). It runs a release build, what users
# run: the debug build's own slowness under this load, not any hold, passes the 1 s a listing
# may take. `make test` runs it for HOSTILE_TEST_SECONDS (test-hostile).
HOSTILE_SECONDS ?= 600
HOSTILE_TEST_SECONDS ?= 45
HOSTILE_OPTIONS ?=
soak-hostile: build
	$(SWIFT) build -c release --product coordfs
	python3 Tests/Scripts/hostile_soak.py --coordfs .build/release/coordfs --counter .build/debug/CoordinatedCounter \
		--seconds $(HOSTILE_SECONDS) $(HOSTILE_OPTIONS)

test-hostile: build
	@$(SWIFT) build -c release --product coordfs >.build/hostile-build.log 2>&1 || { tail -20 .build/hostile-build.log; exit 1; }
	@python3 Tests/Scripts/hostile_soak.py --coordfs .build/release/coordfs --counter .build/debug/CoordinatedCounter \
		--seconds $(HOSTILE_TEST_SECONDS) >.build/hostile-soak.log 2>&1 || { tail -80 .build/hostile-soak.log; exit 1; }
	@echo "hostile soak: $$(grep -E 'listings and lookups|daemon memory' .build/hostile-soak.log | sed 's/^ *//' | paste -sd ';')"

# Hosts that share a store, under faults (Tests/Scripts/cluster_soak.py; as root): three hosts
# and a 3-member etcd cluster in network namespaces, each host running for the whole time a
# `coordinate --write` shell counter, CoordinatedCounter, a writer and a reader of one shared
# file in chunks, fio with crc32c verify and cp/tar of trees, while a nemesis cuts a host off,
# pauses a daemon past its lease, kills one and mounts it again, and kills etcd members and the
# leader. It fails on any lost update, any torn read and any two writers that overlapped.
# `make soak-cluster` first runs the two counters on two hosts CLUSTER_COUNTER_RUNS times
# (2 x 200 updates each, no fault: each run exact, none failed or past 5 s), then the nemesis for
# CLUSTER_SOAK_SECONDS with faults drawn at random; `make test` runs the nemesis for
# CLUSTER_SOAK_TEST_SECONDS, each kind of fault once (test-cluster-soak).
CLUSTER_SOAK_SECONDS ?= 1800
CLUSTER_SOAK_TEST_SECONDS ?= 75
CLUSTER_COUNTER_RUNS ?= 20
soak-cluster: build
	$(SWIFT) build -c release --product coordfs
	python3 Tests/Scripts/cluster_soak.py counters --coordfs .build/release/coordfs --counter .build/debug/CoordinatedCounter \
		--runs $(CLUSTER_COUNTER_RUNS) --rounds 200
	python3 Tests/Scripts/cluster_soak.py nemesis --coordfs .build/release/coordfs --counter .build/debug/CoordinatedCounter \
		--seconds $(CLUSTER_SOAK_SECONDS) --random

test-cluster-soak: build
	@$(SWIFT) build -c release --product coordfs >.build/cluster-soak-build.log 2>&1 || { tail -20 .build/cluster-soak-build.log; exit 1; }
	@python3 Tests/Scripts/cluster_soak.py nemesis --coordfs .build/release/coordfs --counter .build/debug/CoordinatedCounter \
		--seconds $(CLUSTER_SOAK_TEST_SECONDS) >.build/cluster-soak.log 2>&1 || { tail -60 .build/cluster-soak.log; exit 1; }
	@echo "cluster soak: $$(grep -E '^  (counter|faults):' .build/cluster-soak.log | sed 's/^ *//' | paste -sd ';')"

# Lost updates, long: unmodified writers doing read-think-write cycles on shared JSON files, on
# a plain directory of the same filesystem, then through a mount (every update in the files or
# in a conflict version, each conflict told once), then one refusing stale writes (none lost).
VERSIONS_WRITERS ?= 8
VERSIONS_ROUNDS ?= 200
soak-versions: build
	@dir=$$(mktemp -d); mkdir -p $$dir/plain $$dir/backing $$dir/mnt $$dir/backing-refuse $$dir/mnt-refuse; \
	  trap '$(COORDFS) unmount $$dir/mnt 2>/dev/null; $(COORDFS) unmount $$dir/mnt-refuse 2>/dev/null; rm -rf $$dir' EXIT; \
	  set -e; echo "plain directory:"; python3 Tests/Scripts/lost_updates.py $$dir/plain --writers $(VERSIONS_WRITERS) --rounds $(VERSIONS_ROUNDS); \
	  $(COORDFS) mount $$dir/backing $$dir/mnt; echo "coordfs (keep):"; \
	  python3 Tests/Scripts/lost_updates.py $$dir/mnt --writers $(VERSIONS_WRITERS) --rounds $(VERSIONS_ROUNDS) --coordfs $(COORDFS); \
	  $(COORDFS) mount --versions refuse $$dir/backing-refuse $$dir/mnt-refuse; echo "coordfs (refuse):"; \
	  python3 Tests/Scripts/lost_updates.py $$dir/mnt-refuse --writers $(VERSIONS_WRITERS) --rounds $(VERSIONS_ROUNDS) --coordfs $(COORDFS)

# Mounts the demo profile (Mounts/demo.profile: the sample tree Mounts/demo at Mounts/run/demo),
# and prints what to try there (Mounts/demo.hints).
run: build
	@mkdir -p $(DEMO_MNT)
	@if findmnt -n $(CURDIR)/$(DEMO_MNT) >/dev/null 2>&1; then $(COORDFS) unmount $(DEMO_MNT); fi
	@$(COORDFS) mount --profile demo
	@echo ""
	@echo "coordfs: Mounts/demo is mounted at $(DEMO_MNT) (profile Mounts/demo.profile)."
	@echo ""
	@# The hints are a file of their own, so that a test runs each as written (DemoHintsTests).
	@sed -e '/^#/d' -e 's|{DEMO}|$(DEMO_MNT)|g' -e 's|{COORDFS}|$(COORDFS)|g' Mounts/demo.hints
	@echo ""
	@echo "Unmount with: make stop   (or $(COORDFS) unmount $(DEMO_MNT))"

stop:
	@if findmnt -n $(CURDIR)/$(DEMO_MNT) >/dev/null 2>&1; then $(COORDFS) unmount $(DEMO_MNT); fi

# Installs coordfs in $(DESTDIR)$(PREFIX)/bin, mount.coordfs for mount(8) and /etc/fstab in
# $(DESTDIR)$(SBINDIR) (mount(8) looks in /sbin), the man pages and the bash, zsh and fish
# completions. mount(8) runs helpers with a standard PATH: keep PREFIX a standard directory.
SBINDIR ?= /sbin
MANDIR  ?= $(PREFIX)/share/man
MAN_BUILT := .build/man
install:
	$(SWIFT) build -c release --product coordfs
	@$(MAKE) --no-print-directory man COORDFS=.build/release/coordfs
	@$(MAKE) --no-print-directory install-files BINARY=.build/release/coordfs

# The DocC archives of the Swift API, in $(DOCS): FileCoordination (with its articles) and the
# runtime's public types it re-exports (CoordinationDomain, AccessOrigin, the errors). A warning,
# such as a link that resolves to nothing, fails it; make test runs it.
DOCS := .build/docs
docs:
	@mkdir -p $(DOCS)
	@for target in FileCoordination CoordinationRuntime; do \
	  $(SWIFT) package --allow-writing-to-directory $(DOCS) generate-documentation --target $$target \
	    --output-path $(DOCS)/$$target --warnings-as-errors > .build/docs-$$target.log 2>&1 \
	  || { tail -30 .build/docs-$$target.log; echo "docs: $$target failed (the whole run is in .build/docs-$$target.log)"; exit 1; }; \
	done
	@echo "docs: $(DOCS)/FileCoordination and $(DOCS)/CoordinationRuntime, no warnings"

# The man pages, one a subcommand, from the command's own help (swift-argument-parser's
# generator), and mount.coordfs(8).
man:
	@[ -x $(COORDFS) ] || $(SWIFT) build --product coordfs
	$(SWIFT) build --product generate-manual
	@rm -rf $(MAN_BUILT) && mkdir -p $(MAN_BUILT)
	.build/debug/generate-manual $(COORDFS) --multi-page --authors "the coordfs authors" --output-directory $(MAN_BUILT)
	@rm -f $(MAN_BUILT)/coordfs.daemon-start.1; sed -i '/coordfs.daemon-start 1/d' $(MAN_BUILT)/coordfs.1
	cp docs/man/mount.coordfs.8 $(MAN_BUILT)/

# What install puts where, from BINARY and the pages in $(MAN_BUILT): nothing outside DESTDIR.
# The daemon's user units go where systemd looks for a package's (PREFIX/lib/systemd/user).
BINARY ?= .build/release/coordfs
install-files:
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(SBINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 \
	  $(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/zsh/site-functions \
	  $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	install -m 0755 $(BINARY) $(DESTDIR)$(PREFIX)/bin/coordfs
	ln -sf $(PREFIX)/bin/coordfs $(DESTDIR)$(SBINDIR)/mount.coordfs
	install -m 0644 $(MAN_BUILT)/*.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 $(MAN_BUILT)/*.8 $(DESTDIR)$(MANDIR)/man8/
	$(BINARY) --generate-completion-script bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/coordfs
	$(BINARY) --generate-completion-script zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_coordfs
	$(BINARY) --generate-completion-script fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/coordfs.fish
	install -d $(DESTDIR)$(PREFIX)/lib/systemd/user
	for unit in coordfs-daemon.socket coordfs-daemon.service; do \
	  sed 's|/usr/local/bin/coordfs|$(PREFIX)/bin/coordfs|' Mounts/systemd/$$unit > $(DESTDIR)$(PREFIX)/lib/systemd/user/$$unit; done

clean:
	rm -rf .build
