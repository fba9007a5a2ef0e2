//! Sharing a batch out over a group: each item goes to the member that would finish it
//! soonest given what it already has, so members take work in proportion to their measured
//! speed and the batch ends when the slowest share does (no member idles while another still
//! has a queue it could have split).
//!
//! The coordinator keeps each item's index and puts answers back in input order; when a member
//! leaves, the items it had not answered are shared out again over the ones left.

/// One member's cost per item: compute plus, for a member other than the coordinator, the time
/// to send it the item and get the answer back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Worker {
    /// Milliseconds to classify one item.
    pub ms_per_item: f64,
    /// Milliseconds the item spends on the way there and back (0 on the coordinator itself).
    pub transfer_ms: f64,
}

impl Worker {
    fn cost(&self) -> f64 {
        self.ms_per_item + self.transfer_ms
    }
}

/// Which worker takes each of `items` items (index into `workers`), and the predicted time
/// until the last one is answered, in ms. Ties go to the earlier worker. Workers with a cost
/// that is not a positive number take nothing.
///
/// # Panics
/// Never; with no usable worker every item is assigned to worker 0 and the time is infinite.
pub fn assign(items: usize, workers: &[Worker]) -> (Vec<usize>, f64) {
    let usable: Vec<usize> = (0..workers.len())
        .filter(|w| workers[*w].cost().is_finite() && workers[*w].cost() > 0.0)
        .collect();
    if usable.is_empty() {
        return (vec![0; items], f64::INFINITY);
    }
    let mut busy = vec![0.0f64; workers.len()];
    let mut plan = Vec::with_capacity(items);
    for _ in 0..items {
        let best = usable
            .iter()
            .copied()
            .min_by(|a, b| {
                (busy[*a] + workers[*a].cost()).total_cmp(&(busy[*b] + workers[*b].cost()))
            })
            .expect("a usable worker");
        busy[best] += workers[best].cost();
        plan.push(best);
    }
    let makespan = busy.iter().copied().fold(0.0, f64::max);
    (plan, makespan)
}

/// How many items each worker takes under `plan`.
pub fn counts(plan: &[usize], workers: usize) -> Vec<usize> {
    let mut counts = vec![0; workers];
    for w in plan {
        counts[*w] += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(ms: f64) -> Worker {
        Worker { ms_per_item: ms, transfer_ms: 0.0 }
    }

    #[test]
    fn shares_follow_speed_not_turns() {
        // A device twice as fast as two others takes half the batch; round-robin would give
        // each a third.
        let workers = [local(100.0), local(200.0), local(200.0)];
        let (plan, makespan) = assign(20, &workers);
        assert_eq!(counts(&plan, 3), vec![10, 5, 5]);
        assert!((makespan - 1000.0).abs() < 1e-9);
        // One device alone would take 2000 ms: the group is 2x faster.
    }

    #[test]
    fn transfer_time_counts_against_a_remote_member() {
        let workers = [local(100.0), Worker { ms_per_item: 50.0, transfer_ms: 50.0 }];
        let (plan, _) = assign(10, &workers);
        assert_eq!(counts(&plan, 2), vec![5, 5], "equal cost per item once the transfer counts");
        let (plan, _) = assign(9, &[local(100.0), Worker { ms_per_item: 50.0, transfer_ms: 0.0 }]);
        assert_eq!(counts(&plan, 2), vec![3, 6]);
    }

    #[test]
    fn unusable_workers_take_nothing_and_nothing_is_lost() {
        let workers = [local(f64::NAN), local(100.0), local(0.0)];
        let (plan, makespan) = assign(7, &workers);
        assert_eq!(counts(&plan, 3), vec![0, 7, 0]);
        assert!((makespan - 700.0).abs() < 1e-9);
        let (plan, makespan) = assign(3, &[local(-1.0)]);
        assert_eq!((plan.len(), makespan), (3, f64::INFINITY));
        assert!(assign(0, &[local(5.0)]).0.is_empty());
    }

    #[test]
    fn items_left_by_a_member_are_shared_out_again() {
        let workers = [local(100.0), local(100.0), local(100.0)];
        let (plan, _) = assign(12, &workers);
        // Worker 2 leaves before answering any of its items: only those are re-planned.
        let orphans: Vec<usize> = (0..12).filter(|i| plan[*i] == 2).collect();
        let (again, _) = assign(orphans.len(), &workers[..2]);
        assert_eq!(counts(&again, 2), vec![2, 2]);
    }
}
