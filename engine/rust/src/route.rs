//! Routing rows to writer lanes by key group.
//!
//! A row's lane is `xxh3_64(key) % lanes`, or `xxh3_64(payload) % lanes`
//! for a row without a key, so every version of a key lands in one lane.
//! Output rows are grouped by lane with a stable counting sort: within a
//! lane, rows keep their input order.

use xxhash_rust::xxh3::xxh3_64;

/// The lane of a record.
#[inline]
pub fn lane_of(key: &[u8], payload: &[u8], lanes: u32) -> u32 {
    let h = if key.is_empty() {
        xxh3_64(payload)
    } else {
        xxh3_64(key)
    };
    (h % u64::from(lanes)) as u32
}

/// Reorders `rows` (input row indices, with `lane[i]` the lane of
/// `rows[i]`) so each lane's rows are contiguous and in their original
/// order, writing the result to `out` and the lane boundaries to `offsets`
/// (`lanes + 1` entries: lane `l` is `out[offsets[l]..offsets[l + 1]]`).
pub fn group(rows: &[u32], lane: &[u32], lanes: u32, out: &mut Vec<u32>, offsets: &mut Vec<usize>) {
    let lanes = lanes as usize;
    offsets.clear();
    offsets.resize(lanes + 1, 0);
    out.clear();
    if lanes <= 1 {
        out.extend_from_slice(rows);
        offsets[lanes.max(1)..].fill(rows.len());
        return;
    }
    for &l in lane {
        offsets[l as usize + 1] += 1;
    }
    for i in 1..=lanes {
        offsets[i] += offsets[i - 1];
    }
    out.resize(rows.len(), 0);
    // offsets[l] is lane l's write cursor: it starts at the lane's start.
    for (&r, &l) in rows.iter().zip(lane) {
        let slot = &mut offsets[l as usize];
        out[*slot] = r;
        *slot += 1;
    }
    // offsets[l] now holds lane l's end, which is lane l+1's start: shift.
    for i in (1..=lanes).rev() {
        offsets[i] = offsets[i - 1];
    }
    offsets[0] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_stably() {
        let rows = [10, 11, 12, 13, 14, 15];
        let lane = [2, 0, 2, 1, 0, 2];
        let (mut out, mut offs) = (Vec::new(), Vec::new());
        group(&rows, &lane, 4, &mut out, &mut offs);
        assert_eq!(out, vec![11, 14, 13, 10, 12, 15]);
        assert_eq!(offs, vec![0, 2, 3, 6, 6]);
    }

    #[test]
    fn one_lane_keeps_order() {
        let rows = [3, 1, 2];
        let (mut out, mut offs) = (Vec::new(), Vec::new());
        group(&rows, &[], 1, &mut out, &mut offs);
        assert_eq!(out, vec![3, 1, 2]);
        assert_eq!(offs, vec![0, 3]);
    }

    #[test]
    fn lane_prefers_key() {
        for lanes in 1..9 {
            assert_eq!(lane_of(b"k", b"a", lanes), lane_of(b"k", b"b", lanes));
            assert_eq!(
                lane_of(b"", b"p", lanes),
                (xxh3_64(b"p") % u64::from(lanes)) as u32
            );
            assert!(lane_of(b"k", b"", lanes) < lanes);
        }
    }
}
