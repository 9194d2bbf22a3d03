//! Whether a vector loop runs often enough for a form of its code: the
//! 16-element strip of a vectorised sum (`super::simd`) and the wide
//! executor (`super::wide_loop`, from [`super::wide_loop::MIN_TRIPS`]).
//!
//! Owns [`reach`]. A loop's trip count decides when its bounds are known
//! when the code is made or when it runs; only a loop whose range moves
//! with other loops (a triangle, a window) or with the parallel split
//! decides from its bound `Loop::max_trips`, the same for every iteration
//! and every thread count. So one shared code (`super::code_cache`) serves
//! a loop of 8 and one of 128 elements, and does what code with the count
//! compiled in does for each: the same form, the same additions in the
//! same order. Must not emit code.

use crate::kernel::{IVar, Loop};

/// Whether a vector loop reaches a trip-count threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    Yes,
    No,
    /// Its bounds are run-time constants: the code compares its trip count
    /// with the threshold when it runs.
    AtRunTime,
}

/// Whether `l` runs at least `threshold` times: from its trip count when
/// its bounds are constants, at run time when they are run-time constants
/// (`is_param`, `crate::kernel::Kernel::params`), else from its bound
/// `max_trips`.
pub(crate) fn reach(l: &Loop, threshold: u64, is_param: &dyn Fn(IVar) -> bool) -> Reach {
    let at_least = |yes: bool| if yes { Reach::Yes } else { Reach::No };
    if let Some((lo, hi)) = l.constant_range() {
        return at_least(hi - lo + 1 >= threshold as i64);
    }
    let run_time = !l.is_parallel()
        && l.lower
            .iter()
            .chain(&l.upper)
            .all(|b| b.num.terms.iter().all(|&(v, _)| is_param(v)));
    if run_time {
        Reach::AtRunTime
    } else {
        at_least(l.max_trips >= threshold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{Bound, Lin, END, START};

    fn l(lower: Lin, upper: Lin, max_trips: u64) -> Loop {
        Loop {
            var: IVar(9),
            lower: vec![Bound { num: lower, den: 1 }],
            upper: vec![Bound { num: upper, den: 1 }],
            body: Vec::new(),
            max_trips,
            vector: true,
        }
    }

    #[test]
    fn constant_bounds_decide_by_their_count_not_by_max_trips() {
        let no_param = |_: IVar| false;
        // 0 ..= 63: 64 trips, whatever max_trips says.
        let full = l(Lin::constant(0), Lin::constant(63), 1);
        assert_eq!(reach(&full, 64, &no_param), Reach::Yes);
        let short = l(Lin::constant(1), Lin::constant(63), 1000);
        assert_eq!(reach(&short, 64, &no_param), Reach::No);
        // Rounded bounds: ⌈−3/2⌉ = −1 ..= ⌊9/2⌋ = 4, 6 trips.
        let mut halves = l(Lin::constant(-3), Lin::constant(9), 0);
        halves.lower[0].den = 2;
        halves.upper[0].den = 2;
        assert_eq!(reach(&halves, 6, &no_param), Reach::Yes);
        assert_eq!(reach(&halves, 7, &no_param), Reach::No);
    }

    #[test]
    fn run_time_constants_decide_when_the_code_runs_and_loop_variables_by_max_trips() {
        let p = IVar(5);
        let is_param = |v: IVar| v == p;
        assert_eq!(
            reach(&l(Lin::constant(0), Lin::var(p), 8), 64, &is_param),
            Reach::AtRunTime
        );
        // A triangle (`0 ..= v3`) or the parallel split: max_trips.
        for v in [IVar(3), START, END] {
            let moving = l(Lin::constant(0), Lin::var(v), 100);
            // (the parallel split's bounds are never run-time constants)
            let params = |x: IVar| x == p || x == START || x == END;
            assert_eq!(reach(&moving, 64, &params), Reach::Yes);
            assert_eq!(reach(&moving, 128, &params), Reach::No);
        }
    }
}
