//! bperf record's BPF ring buffer (BPF_MAP_TYPE_RINGBUF): one ring that every CPU's
//! program writes its slices into (bpf_ringbuf_output in bperf.bpf.c) and that record's
//! reader drains through libbpf's ring_buffer. Made here, before the program is loaded,
//! and handed to the loader, which makes it the program's own.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapHandle, MapType, RingBufferBuilder};

/// The size of a memory page: a ring buffer holds a power of two of them.
pub(crate) fn page_size() -> usize {
    rustix::param::page_size()
}

/// The ring: a BPF map of `bytes` bytes of records.
pub struct SliceRing {
    map: MapHandle,
    bytes: usize,
}

impl SliceRing {
    /// A ring of `bytes` bytes: a power of two, at least a page.
    pub fn create(bytes: usize) -> Result<SliceRing> {
        let page = page_size();
        if !bytes.is_power_of_two() || bytes < page || bytes > u32::MAX as usize / 2 + 1 {
            bail!("a ring buffer of {bytes} bytes: it must be a power of two from {page} to 2 GiB");
        }
        let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
            ..Default::default()
        };
        let map = MapHandle::create(
            MapType::RingBuf,
            Some("slice_ring"),
            0,
            0,
            bytes as u32,
            &opts,
        )
        .with_context(|| format!("cannot create a BPF ring buffer of {bytes} bytes"))?;
        Ok(SliceRing { map, bytes })
    }

    /// The map, for the loader to use as bperf.bpf.c's slice_ring.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.map.as_fd()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// A reader that hands every record to `on`, oldest first.
    pub fn reader<'a>(&'a self, on: impl FnMut(&[u8]) + 'a) -> Result<SliceReader<'a>> {
        let mut on = on;
        let mut b = RingBufferBuilder::new();
        b.add(&self.map as &dyn MapCore, move |r| {
            on(r);
            0
        })
        .context("reading the ring buffer")?;
        let ring = b.build().context("reading the ring buffer")?;
        Ok(SliceReader { ring })
    }
}

/// The ring being read.
pub struct SliceReader<'a> {
    ring: libbpf_rs::RingBuffer<'a>,
}

impl SliceReader<'_> {
    /// Waits until the program woke the reader, or `timeout`, then drains the ring.
    pub(crate) fn wait_and_drain(&self, timeout: Duration) -> Result<()> {
        match self.ring.poll_raw(timeout) {
            n if n >= 0 || n == -libc::EINTR => Ok(()),
            n => Err(std::io::Error::from_raw_os_error(-n)).context("waiting for the ring buffer"),
        }
    }

    /// Drains the ring.
    pub fn drain(&self) -> Result<()> {
        match self.ring.consume_raw() {
            n if n >= 0 => Ok(()),
            n => Err(std::io::Error::from_raw_os_error(-n)).context("draining the ring buffer"),
        }
    }
}
