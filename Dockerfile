# bperf's container image: Debian 12 slim with the release binary built on the host
# (cargo build --release; `make image` builds both). No registry is needed where
# debian:bookworm-slim is already local: scripts/debian-root --image makes it with
# debootstrap from Debian's mirror and `docker import`.
#
# Run it as deploy/kubernetes/daemonset.yaml does (README: "In a container"):
#   docker run -d --name bperf --pid=host --network=host --cap-add BPF --cap-add PERFMON \
#     --cap-add SYS_RESOURCE --cap-add DAC_READ_SEARCH --security-opt seccomp=unconfined \
#     -v /sys/fs/cgroup:/sys/fs/cgroup:ro -v /sys/kernel/btf:/sys/kernel/btf:ro \
#     -v /sys/fs/bpf:/sys/fs/bpf:ro -v /var/run/docker.sock:/var/run/docker.sock:ro \
#     bperf:latest
FROM debian:bookworm-slim

# libelf1 and zlib1g: the shared libraries bperf links beyond libc. Debian's slim image
# lacks libelf1 (fetched from Debian's mirror then); the local base has it already.
RUN if ! ldconfig -p | grep -q 'libelf\.so\.1 '; then \
        apt-get update && apt-get install -y --no-install-recommends libelf1 zlib1g && \
        rm -rf /var/lib/apt/lists/*; \
    fi

COPY target/release/bperf /usr/bin/bperf
COPY man/ /usr/share/man/man1/

# bperf serve's default port; the metrics are at /metrics.
EXPOSE 9464
ENTRYPOINT ["/usr/bin/bperf"]
CMD ["serve", "--listen", "0.0.0.0:9464", "--for-each-container"]
