# coordfs — `make run` and `make test` set up everything a fresh machine needs.
SWIFT      ?= swift
PACKAGES   := libfuse3-dev fuse3 fio pkg-config
STAMP      := .build/.setup-done

.PHONY: all setup build test bench run clean

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

build: setup
	$(SWIFT) build

# Builds once, then runs every suite against that build. Serially: many tests block threads on
# purpose (a held access, a waiting reader), which in parallel would starve the 2-thread pool
# that async tests need; serially the whole run takes seconds.
test: setup
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build --no-parallel

bench: setup
	$(SWIFT) build -c release --product CoordFSBench
	.build/release/CoordFSBench

run: build
	$(SWIFT) run --skip-build coordfs demo

clean:
	rm -rf .build
