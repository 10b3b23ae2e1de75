# bperf's container image: Debian 12 slim with the release binary built on the host
# (cargo build --release; `make image` builds both). No registry is needed where
# debian:bookworm-slim is already local: scripts/debian-root --image makes it with
# debootstrap from Debian's mirror and `docker import`.
#
# Run it as deploy/kubernetes/daemonset.yaml does (docs/deploy.md: "In a container"):
#   docker run -d --name bperf --pid=host --network=host --cap-drop=ALL --cap-add BPF \
#     --cap-add PERFMON -v /sys/fs/cgroup:/sys/fs/cgroup:ro \
#     -v /sys/kernel/btf:/sys/kernel/btf:ro -v /sys/fs/bpf:/sys/fs/bpf:ro \
#     -v /var/run/docker.sock:/var/run/docker.sock:ro bperf:latest
# (Docker before 23 knows neither capability: --cap-add SYS_ADMIN instead.)
FROM debian:bookworm-slim

# libelf1 and zlib1g: the shared libraries bperf links beyond libc; libcap2-bin: setcap,
# below. Debian's slim image lacks libelf1 and libcap2-bin (fetched from Debian's
# archive then); the local base has them already.
RUN if ! ldconfig -p | grep -q 'libelf\.so\.1 ' || ! command -v setcap >/dev/null; then \
        apt-get update && \
        apt-get install -y --no-install-recommends libelf1 zlib1g libcap2-bin && \
        rm -rf /var/lib/apt/lists/*; \
    fi

COPY target/release/bperf /usr/bin/bperf
# CAP_BPF and CAP_PERFMON permitted to whoever runs bperf where the container may hold
# them (its bounding set), for a non-root uid as the DaemonSet runs it; not effective
# (bperf makes them so), so that exec does not fail where the bounding set lacks them.
RUN setcap cap_bpf,cap_perfmon=p /usr/bin/bperf
COPY man/ /usr/share/man/man1/

# bperf serve's default port; the metrics are at /metrics.
EXPOSE 9464
ENTRYPOINT ["/usr/bin/bperf"]
CMD ["serve", "--listen", "0.0.0.0:9464", "--for-each-container"]
