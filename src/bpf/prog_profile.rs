//! The loader of prog_profile.bpf.c (beside this file): an fentry and an fexit program
//! on one target BPF program, counting events inside it (bperf stat -b).

mod skel {
    #![allow(
        clippy::all,
        unused_imports,
        dead_code,
        non_camel_case_types,
        non_snake_case
    )]
    include!(concat!(env!("OUT_DIR"), "/prog_profile.skel.rs"));
}

use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject};

use crate::reading::Reading;
use skel::types::profile_readings;
use skel::{ProgProfileSkel, ProgProfileSkelBuilder};

const fn array_len<T, const N: usize>(_field: fn(&profile_readings) -> &[T; N]) -> usize {
    N
}

/// Most events counted inside one program (PROFILE_MAX_EVENTS in prog_profile.h).
pub const MAX_EVENTS: usize = array_len(|r| &r.v);

/// Why the profiler is not counting a program.
#[derive(Debug)]
pub enum LoadError {
    /// The kernel refused the fentry/fexit programs (no BPF trampolines); libbpf's error.
    Refused(String),
    /// Anything else: the message says what.
    Other(anyhow::Error),
}

/// The fentry/fexit pair on one target program, loaded and attached. Dropping it
/// detaches and unloads both.
pub struct Profiler<'obj> {
    skel: ProgProfileSkel<'obj>,
    nr_events: usize,
}

impl<'obj> Profiler<'obj> {
    /// Loads the pair for the program behind `target`, whose main function is `func`,
    /// with `fds` (event, CPU, perf event) in its event array, and attaches it.
    pub fn load(
        target: BorrowedFd,
        func: &str,
        nr_events: usize,
        fds: &[(usize, u32, BorrowedFd)],
        storage: &'obj mut MaybeUninit<OpenObject>,
    ) -> Result<Self, LoadError> {
        let other = LoadError::Other;
        if nr_events > MAX_EVENTS {
            return Err(other(anyhow::anyhow!(
                "at most {MAX_EVENTS} events can be counted inside a BPF program"
            )));
        }
        let nr_cpus = libbpf_rs::num_possible_cpus()
            .context("counting possible CPUs")
            .map_err(other)?;
        let mut open = ProgProfileSkelBuilder::default()
            .open(storage)
            .context("opening the BPF program profiler")
            .map_err(other)?;
        let ro = open
            .maps
            .rodata_data
            .as_deref_mut()
            .expect("the profiler has read-only data");
        ro.nr_events = nr_events as u32;
        ro.nr_cpus = nr_cpus as u32;
        let slots = (nr_cpus * nr_events.max(1)) as u32;
        let mut setup = || -> Result<()> {
            open.maps.events.set_max_entries(slots)?;
            for prog in [
                &mut open.progs.prog_profile_entry,
                &mut open.progs.prog_profile_exit,
            ] {
                prog.set_attach_target(target.as_raw_fd(), Some(func.to_string()))?;
            }
            Ok(())
        };
        setup()
            .context("pointing the profiler at its program")
            .map_err(other)?;
        let mut skel = open.load().map_err(|e| LoadError::Refused(e.to_string()))?;
        fill_events(&skel, nr_cpus, fds).map_err(other)?;
        skel.attach()
            .context("attaching the profiler to its program")
            .map_err(other)?;
        Ok(Profiler { skel, nr_events })
    }

    /// Each event's totals over the target's runs so far, summed over the CPUs.
    pub fn read(&self) -> Result<Vec<Reading>> {
        let per_cpu = self
            .skel
            .maps
            .totals
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .context("reading the counts inside the BPF program")?
            .unwrap_or_default();
        let mut sums = vec![Reading::default(); self.nr_events];
        for bytes in &per_cpu {
            let mut r = profile_readings::default();
            if bytes.len() < std::mem::size_of::<profile_readings>() {
                bail!("the profiler's totals are {} bytes", bytes.len());
            }
            // SAFETY: profile_readings is plain old data (u64s only), and bytes holds at
            // least its size.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    std::ptr::addr_of_mut!(r).cast::<u8>(),
                    std::mem::size_of::<profile_readings>(),
                )
            };
            for (sum, v) in sums.iter_mut().zip(&r.v) {
                sum.add(&Reading {
                    counter: v.counter,
                    enabled: v.enabled,
                    running: v.running,
                });
            }
        }
        Ok(sums)
    }
}

/// Puts each (event, CPU) perf event at event * nr_cpus + cpu in the event array.
fn fill_events(
    skel: &ProgProfileSkel,
    nr_cpus: usize,
    fds: &[(usize, u32, BorrowedFd)],
) -> Result<()> {
    for &(event, cpu, fd) in fds {
        let key = (event * nr_cpus + cpu as usize) as u32;
        let val = fd.as_raw_fd() as u32;
        skel.maps
            .events
            .update(&key.to_ne_bytes(), &val.to_ne_bytes(), MapFlags::ANY)
            .context("filling the profiler's event array")?;
    }
    Ok(())
}
