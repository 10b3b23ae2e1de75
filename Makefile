# bperf: two commands cover the quick start (see README.md), both as root:
#   make run    set up, build, count every cgroup for five seconds
#   make test   set up, build, run every test (privileged ones included)
#   make check  the fast subset for the edit loop: formatting, lints, unprivileged tests
#   make bench  set up, build, measure what counting costs against perf (bench/)
#   make arm64  set up, build bperf for arm64 with Debian's cross toolchains
#   make deb    set up, build, package: target/bperf_VERSION_ARCH.deb (dpkg-deb)
#   make image  set up, build, the container image bperf:VERSION from the Dockerfile
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo

.PHONY: setup build run test check bench arm64 man deb image clean

setup:
	@./scripts/setup

build: setup
	$(CARGO) build --release

run: build
	./target/release/bperf stat -a --all-cgroups -I 1000 --interval-count 5

# Counting tests measure each other on small machines: one test at a time, a module of
# tests/it at a time, each part timed (scripts/test-suite; scripts/test-times prints the
# last run's table). The tests that need root are #[ignore]d, so that a plain `cargo test`
# without root lists them as ignored; make test runs them too (and they fail, saying so,
# when not run as root).
test: setup
	@./scripts/test-suite

# The edit loop's subset, in a few minutes: formatting, lints, the unit tests, and the
# tests that need neither root nor an emulated machine (those run as their own tests
# in make test).
check: setup
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --all-targets -- -D warnings
	$(CARGO) test --release --lib --bins
	$(CARGO) test --release --test it -- --skip vm_x86:: --skip vm_arm64::

# The cost-of-counting benchmark against perf (bench/README.md); about 30 minutes.
bench: build
	./bench/run

# The man pages, from the command-line definitions (tests/it/man.rs checks they are current).
arm64: setup
	@./scripts/setup --test
	./scripts/build-arm64

man: setup
	$(CARGO) run --release --example man

# The Debian package: binary, man pages, completions, systemd unit (scripts/build-deb).
deb: build
	./scripts/build-deb

# The container image from the Dockerfile, offline: its base, debian:bookworm-slim, is
# made locally (debootstrap and docker import) when Docker has none.
image: build
	./scripts/debian-root --image >/dev/null
	docker build -t bperf:$$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1) -t bperf:latest .

clean:
	$(CARGO) clean
