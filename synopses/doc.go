// Package synopses holds mlstream's data synopses as plain values: heavy
// hitters ([HeavyHitters], Space-Saving, mergeable), distinct counts
// ([Distinct], HyperLogLog over github.com/axiomhq/hyperloglog) and tumbling
// event-time windows of either ([WindowedHH], [WindowedDistinct]). They take
// no clock, disk or network and start no goroutines; the runtime feeds them
// events, merges the partitions' copies for queries and drives their
// fault-tolerance hooks (each implements ft.Stateful). None is safe for
// concurrent use: one goroutine owns each.
//
// # Heavy hitters
//
// Every reported item carries bounds that provably contain its true count:
// Lower = count - err, Upper = count + the sum of Widen calls; an untracked
// item's count is at most MaxUntracked. Merge keeps the bounds valid for the
// union of the streams (proof sketch on Merge). After a crash the runtime
// recovers the last backup (full snapshot plus deltas) and calls Widen with
// the most weight any one item can have had in the lost events: the summary
// then still contains every true count (Lower stays valid because a lost
// event can only make a true count larger), so no true heavy hitter is
// missed; this is the AF-Stream compensation of one-sided sketches.
// Divergence is L∞ over the counters, as in the paper: the most any counter
// grew since the backup, whichever item it holds (a counter only grows; an
// eviction hands it to a new item with one more). Per item instead, every
// eviction would jump the divergence to the minimum count.
//
// # Distinct counts: divergence and its bound
//
// The state is m = 2^p registers M[j], each the maximum over the items hashed
// to j of a geometric value; they only grow. We define the divergence as D,
// the number of registers changed since the last backup. Why this unit:
//
//   - It is O(1): a shadow of the registers (computed from the 64-bit hash
//     exactly as the library's dense sketch does, checked by a test) says
//     whether an insert raised a register; a bitset marks it once.
//   - One event raises at most one register, so the paper's α is 1 and the
//     AF-Stream promise Θ + Lα holds in registers: a crash loses at most
//     D ≤ θ + (events lost) register increases.
//   - The estimate depends on how many registers are lost, not by how much
//     each moved: the value a register lost is bounded below by 0 in any
//     case, and a distance such as L1 or L∞ over register values says
//     nothing about the harmonic mean below.
//
// The bound. The raw estimate is E = α_m m² / S with S = Σ_j 2^-M[j]. After a
// recovery the registers M' ≤ M differ from the no-crash registers M in at
// most D places (lost increases only lower registers, raising S). Each
// changed place j moves one term from 2^-M[j] up to 2^-M'[j], by less than
// 2^-M'[j] ≤ 1, so
//
//	S' - T_D ≤ S ≤ S',   T_D = the sum of the D largest terms 2^-M'[j],
//
// and the no-crash estimate is E ≤ E'·S'/(S'-T_D) = E'/(1-ε) with
// ε = T_D/S' ≤ D/S'. That is the relative error of the recovered estimate
// E' (it can only be low), computed from the recovered registers alone.
// Closed forms:
//
//   - Large range (n ≫ m): the terms 2^-M'[j]·(n/m) are roughly exponential
//     (P(2^-M ≥ t·m/n) ≈ e^-t), so the D largest of m sum to about
//     (D/m)(1 + ln(m/D)) of S': ε ≈ (D/m)(1+ln(m/D)); with every register
//     equal it would be exactly D/m.
//   - Small range (n ≲ m, where the estimator is linear counting
//     m·ln(m/V) over V zero registers): D registers back to zero lower the
//     estimate by about D items, ε ≈ D/E.
//   - Always ε ≤ D/S' ≤ D·E'/(α_m m²), and ε ≤ D/m·2^(maxM' - minM').
//
// The library's estimate adds the LogLog-Beta bias correction to the raw
// one, so [Distinct.RecoveryBound] computes ε on it directly: the estimate
// with the D smallest registers raised to their maximum (the worst case of
// the derivation) against the estimate now, O(m). TestRecoveryBoundClosedForm
// checks it against the closed forms, and the crash tests check that the
// no-crash estimate never exceeds the worst case. [Distinct.Widen] records D
// after a recovery (widenings add up, since the registers of several crashes
// differ in at most the sum of places), and [Distinct.Bounds] reports
// [E(1-zσ), E*(1+zσ)] with σ = 1.04/√m and E* the widened worst case.
// Choosing Θ = ε·m/(1+ln(1/ε)) registers therefore keeps the recovery error
// of one crash near ε in the large range.
//
// Deltas are the changed registers as (index, value) pairs, applied by
// inserting a synthetic hash that lands on that register with that value. A
// delta of more than m/4 registers is written as a full snapshot instead (a
// full snapshot is 2^p bytes plus a header: 16 KiB at p=14, small enough that
// runtimes may simply always back up in full).
//
// # Windows
//
// Tumbling windows by event time in milliseconds: the window of ts is
// ⌊ts/size⌋. A window closes when the watermark passes its end: the
// summary's own largest event time, or, once SetWatermark was called, the
// watermark it is told (a job's, the least over its partitions, so that
// every partition closes a window at the same point). Closed windows are
// kept among the last `keep`; an event of a kept closed window is added to
// it and counted as late; an event older than every kept window is counted
// as dropped, never lost silently. Besides those, a summary holds at most
// SetMaxOpen open windows (DefaultOpen); past it the oldest window is let
// go and counted in Evicted.
package synopses
