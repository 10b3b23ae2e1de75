//! Per-CPU perf ring buffers: one PERF_COUNT_SW_BPF_OUTPUT event per CPU, which a BPF
//! program writes with bpf_perf_event_output and bperf record reads here. The layout (the
//! control page, record headers, record types) is perf-event-open-sys's.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use memmap2::{MmapOptions, MmapRaw};
use perf_event_open_sys::bindings::{
    perf_event_attr, perf_event_header, perf_event_mmap_page, PERF_ATTR_SIZE_VER8,
    PERF_COUNT_SW_BPF_OUTPUT, PERF_RECORD_LOST, PERF_RECORD_SAMPLE, PERF_SAMPLE_RAW,
    PERF_TYPE_SOFTWARE,
};
use rustix::event::{poll, PollFd, PollFlags};

use super::perf_event::{open, Target};

/// What a ring holds: a record the BPF program sent, or how many it could not.
#[derive(Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// The bytes the program sent (padded to 8 bytes by the kernel).
    Sample(&'a [u8]),
    /// The kernel dropped this many records: the ring was full.
    Lost(u64),
}

/// One CPU's ring: the event and its mapping (a control page, then `data` bytes).
pub struct Ring {
    cpu: u32,
    fd: OwnedFd,
    map: MmapRaw,
    page: usize,
    data: usize,
    /// A record that wraps around the end of the ring, copied whole.
    wrapped: Vec<u8>,
}

/// The size of a memory page.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// Opens the ring of `cpu` with `pages` data pages (a power of two). The reader is woken
/// when `wake_at` bytes wait to be read.
pub fn open_ring(cpu: u32, pages: usize, wake_at: u32) -> io::Result<Ring> {
    if !pages.is_power_of_two() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "ring pages must be a power of two",
        ));
    }
    let mut attr = perf_event_attr {
        type_: PERF_TYPE_SOFTWARE,
        size: PERF_ATTR_SIZE_VER8,
        config: PERF_COUNT_SW_BPF_OUTPUT as u64,
        sample_type: PERF_SAMPLE_RAW as u64,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = 1;
    attr.set_watermark(1);
    attr.__bindgen_anon_2.wakeup_watermark = wake_at;
    let fd = open(&mut attr, Target::Cpu(cpu), None)?;
    let page = page_size();
    let map = MmapOptions::new().len((pages + 1) * page).map_raw(&fd)?;
    Ok(Ring {
        cpu,
        fd,
        map,
        page,
        data: pages * page,
        wrapped: Vec::new(),
    })
}

impl Ring {
    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn control(&self) -> *mut perf_event_mmap_page {
        self.map.as_mut_ptr().cast()
    }

    /// Hands every record waiting in the ring to `on`, oldest first, then gives their
    /// room back to the kernel. Returns how many bytes were read.
    pub fn drain(&mut self, on: &mut dyn FnMut(Record)) -> usize {
        let control = self.control();
        // SAFETY: the control page is mapped for as long as self; the kernel writes
        // data_head, we write data_tail, each an aligned u64.
        let head = unsafe { std::ptr::addr_of!((*control).data_head).read_volatile() };
        // The records up to head are written before head is: read them after it.
        fence(Ordering::Acquire);
        let tail = unsafe { std::ptr::addr_of!((*control).data_tail).read_volatile() };
        let mut at = tail;
        while at < head {
            let Some(size) = self.record_at(at, head, on) else {
                break;
            };
            at += size;
        }
        // Done with the records before the kernel may write over them.
        fence(Ordering::SeqCst);
        // SAFETY: as above.
        unsafe { std::ptr::addr_of_mut!((*control).data_tail).write_volatile(head) };
        (head - tail) as usize
    }

    /// Hands the record at ring offset `at` to `on`; its size, None if malformed.
    fn record_at(&mut self, at: u64, head: u64, on: &mut dyn FnMut(Record)) -> Option<u64> {
        // struct perf_event_header { u32 type; u16 misc; u16 size; }
        let hsize = std::mem::size_of::<perf_event_header>();
        let (mut kind, mut size) = (0u32, 0u64);
        self.copy_out(at, hsize, |b| {
            kind = u32::from_ne_bytes(b[..4].try_into().expect("4 bytes"));
            size = u64::from(u16::from_ne_bytes(b[6..8].try_into().expect("2 bytes")));
        });
        if size < hsize as u64 || at + size > head {
            return None;
        }
        self.copy_out(at, size as usize, |rec| {
            let body = &rec[hsize..];
            match kind {
                PERF_RECORD_SAMPLE if body.len() >= 4 => {
                    let n = u32::from_ne_bytes(body[..4].try_into().expect("4 bytes")) as usize;
                    if let Some(raw) = body.get(4..4 + n) {
                        on(Record::Sample(raw));
                    }
                }
                // struct { u64 id; u64 lost; }
                PERF_RECORD_LOST if body.len() >= 16 => {
                    on(Record::Lost(u64::from_ne_bytes(
                        body[8..16].try_into().expect("8 bytes"),
                    )));
                }
                _ => {}
            }
        });
        Some(size)
    }

    /// Calls `f` with the `len` bytes at ring offset `at`, copied when they wrap.
    fn copy_out(&mut self, at: u64, len: usize, f: impl FnOnce(&[u8])) {
        let start = (at % self.data as u64) as usize;
        // SAFETY: the data area follows the control page and is `data` bytes long;
        // the kernel does not write between tail and head.
        let ring =
            unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(self.page), self.data) };
        if start + len <= self.data {
            f(&ring[start..start + len]);
            return;
        }
        self.wrapped.clear();
        self.wrapped.extend_from_slice(&ring[start..]);
        self.wrapped
            .extend_from_slice(&ring[..len - (self.data - start)]);
        f(&self.wrapped);
    }
}

/// Waits until a ring has reached its wakeup mark, or `timeout`.
pub fn wait(rings: &[Ring], timeout: Duration) -> io::Result<()> {
    let mut fds: Vec<PollFd> = rings
        .iter()
        .map(|r| PollFd::from_borrowed_fd(r.fd(), PollFlags::IN))
        .collect();
    let timeout = rustix::event::Timespec {
        tv_sec: timeout.as_secs() as _,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    match poll(&mut fds, Some(&timeout)) {
        Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
