use super::*;

/// A cgroup as the tests keep it: its name, weighed by its length.
#[derive(Clone, Debug, PartialEq)]
struct Cg(String);

impl Weigh for Cg {
    fn weight(&self) -> usize {
        self.0.len()
    }
}

const SLICE: usize = 64;

/// Slice `n`: its number, then bytes that compress as little as a slice's deltas do.
fn slice(n: u64) -> Vec<u8> {
    let mut b = n.to_le_bytes().to_vec();
    let mut x = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while b.len() < SLICE {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.push(x as u8);
    }
    b
}

fn number(raw: &[u8]) -> u64 {
    u64::from_le_bytes(raw[..8].try_into().unwrap())
}

/// What a replay gives, as text: `alive SLOT NAME`, `slice N`, `began SLOT NAME`,
/// `ended SLOT`.
fn replayed(store: &FlightStore<Cg>, since_ns: u64) -> Vec<String> {
    let mut seen = Vec::new();
    store
        .replay(since_ns, |r| {
            seen.push(match r {
                Record::Alive(slot, c) => format!("alive {slot} {}", c.0),
                Record::Slice(raw) => format!("slice {}", number(raw)),
                Record::Began(slot, c) => format!("began {slot} {}", c.0),
                Record::Ended(slot) => format!("ended {slot}"),
            })
        })
        .unwrap();
    seen
}

fn slices_of(seen: &[String]) -> Vec<u64> {
    seen.iter()
        .filter_map(|s| s.strip_prefix("slice "))
        .map(|n| n.parse().unwrap())
        .collect()
}

#[test]
fn it_keeps_the_newest_slices_within_its_budget() {
    let budget = 4 * SEGMENT_BYTES;
    let mut store = FlightStore::<Cg>::new(budget, SLICE).unwrap();
    // Ten budgets' worth of slices.
    let n = (10 * budget / SLICE) as u64;
    for i in 0..n {
        store.push_slice(&slice(i), (i, i)).unwrap();
        assert!(
            store.held() <= budget,
            "{} held after slice {i}",
            store.held()
        );
    }
    let kept = slices_of(&replayed(&store, 0));
    assert_eq!(kept.len(), store.slices());
    assert_eq!(kept.len() as u64 + store.dropped(), n);
    // The newest, in order, none missing, the last one included.
    let first = kept[0];
    assert_eq!(kept, (first..n).collect::<Vec<_>>());
    // Sealed segments are compressed, not dropped for nothing: most of the budget holds
    // slices (these compress little, as the deltas of real slices do).
    assert!(
        kept.len() * SLICE > budget / 2,
        "{} slices kept",
        kept.len()
    );
}

#[test]
fn a_replay_starts_with_the_cgroups_alive_when_its_first_segment_began() {
    let mut store = FlightStore::new(2 * SEGMENT_BYTES, SLICE).unwrap();
    store.began(0, Cg("web".into())).unwrap();
    store.began(1, Cg("db".into())).unwrap();
    store.push_slice(&slice(0), (0, 0)).unwrap();
    store.ended(1).unwrap();
    store.began(1, Cg("batch".into())).unwrap();
    store.push_slice(&slice(1), (1, 1)).unwrap();
    store.ended(0).unwrap();
    let all = replayed(&store, 0);
    let want = [
        "began 0 web",
        "began 1 db",
        "slice 0",
        "ended 1",
        "began 1 batch",
        "slice 1",
        "ended 0",
    ];
    assert_eq!(all, want);
    // Once the first segments are dropped, the cgroups alive at the oldest kept one
    // come first: web's end is seen, and batch's beginning, as alive.
    let per_segment = SEGMENT_BYTES / SLICE;
    for i in 2..(3 * per_segment as u64) {
        store.push_slice(&slice(i), (i, i)).unwrap();
    }
    let later = replayed(&store, 0);
    assert!(store.dropped() > 0);
    assert_eq!(later[0], "alive 1 batch");
    assert!(later[1].starts_with("slice "), "{:?}", &later[..3]);
    assert!(
        !later.iter().any(|r| r.contains("web")),
        "{:?}",
        &later[..3]
    );
}

#[test]
fn a_replay_since_a_time_leaves_out_the_older_segments() {
    let mut store = FlightStore::<Cg>::new(8 * SEGMENT_BYTES, SLICE).unwrap();
    let per_segment = (SEGMENT_BYTES / SLICE) as u64;
    for i in 0..4 * per_segment {
        store.push_slice(&slice(i), (i * 10, i * 10)).unwrap();
    }
    // From the third segment's slices on: the segments that end before are left out,
    // the one the time falls in is whole.
    let since = (2 * per_segment + 5) * 10;
    let kept = slices_of(&replayed(&store, since));
    assert_eq!(kept.first(), Some(&(2 * per_segment)));
    assert_eq!(kept.last(), Some(&(4 * per_segment - 1)));
    assert!(slices_of(&replayed(&store, u64::MAX)).is_empty());
}

#[test]
fn it_refuses_what_it_cannot_keep() {
    assert_eq!(
        FlightStore::<Cg>::new(SEGMENT_BYTES, SLICE).unwrap_err(),
        TooSmall(SEGMENT_BYTES)
    );
    let mut store = FlightStore::<Cg>::new(2 * SEGMENT_BYTES, SLICE).unwrap();
    assert!(store.push_slice(&[0; SLICE + 1], (0, 0)).is_err());
    assert_eq!(store.slices(), 0);
}

#[test]
fn sizes_are_read_as_perf_users_write_them() {
    assert_eq!(parse_size("64M"), Some(64 << 20));
    assert_eq!(parse_size("64MiB"), Some(64 << 20));
    assert_eq!(parse_size("512k"), Some(512 << 10));
    assert_eq!(parse_size("2G"), Some(2 << 30));
    assert_eq!(parse_size("4096"), Some(4096));
    for bad in ["", "M", "-1M", "1.5M", "64X", "99999999999999999999G", " "] {
        assert_eq!(parse_size(bad), None, "{bad:?}");
    }
}
