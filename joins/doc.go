// Package joins holds mlstream's windowed stream-stream join as a plain
// value ([Join]): a symmetric hash join of two streams on a key within an
// event-time interval, with bounded state and online estimates of COUNT,
// SUM and AVG over the join. It takes no clock, disk or network and starts
// no goroutines; the runtime feeds it tuples in arrival order, merges the
// partitions' estimates for queries and drives its fault-tolerance hooks
// (Join implements ft.Stateful). Not safe for concurrent use: one goroutine
// owns each Join.
//
// # Join
//
// A left tuple l and a right tuple r match when they have the same key and
// |l.ts − r.ts| ≤ Within. Each arriving tuple probes the other side's
// buffered tuples of its key, emits every match, and is buffered itself.
// The watermark is the highest event time seen minus Lateness; a tuple
// older than the watermark is late: counted and dropped. A buffered tuple
// older than watermark − Within can match no tuple that is not late, so it
// expires. Tuples sit in one ring in arrival order; expiry and eviction take
// them from its front, so a tuple that arrived out of order may outlive its
// expiry until the tuples that arrived before it go (never by more than
// Lateness); probes check the interval, so it never matches wrongly.
//
// # Bounded state
//
// MaxBytes bounds the state: the ring (TupleBytes per slot) plus the key
// index (IndexBytes per key, an upper bound on a Go map's cost per entry,
// growth slack included). The ring grows by doubling up to the most tuples
// the budget allows; past that the oldest tuple is evicted, counted, and
// the estimates of every window it could have matched in are marked
// incomplete (their COUNT is then a lower bound). Keys are stored as 64-bit
// hashes: two keys collide with probability about n²/2⁶⁵ for n keys in
// state (10⁻⁷ for a million).
//
// # Estimates (Ripple Join)
//
// With Sample = p < 1 each side keeps a Bernoulli sample: a tuple is kept
// with probability p, decided by a hash of its sequence number and side
// (deterministic, so a replay after a crash samples the same tuples). A
// pair of matching tuples survives with probability p², so Ĉ = M/p² for M
// sampled matches, and Ŝ = Σy/p² for pair values y (the value of one side's
// tuple, ValueSide). Pairs that share a tuple are dependent; with d_i the
// matches of tuple i the exact variance is
//
//	Var Ĉ = ((1−p²)/p²)·C + ((1−p)/p)·Σ_i d_i(d_i − 1)
//
// and M/p² and Σ m_i(m_i − 1)/p³ (m_i the sampled matches of a sampled tuple)
// estimate its two sums without bias, so
//
//	Var̂ Ĉ = ((1−p²)·M + (1−p)·Q₁₁)/p⁴,  Q₁₁ = Σ_i m_i(m_i − 1),
//
// the same with y for SUM (Q_yy = Σ_i (A_i² − Σ_j y_ij²), A_i = Σ_j y_ij) and
// the covariance for AVG = Ŝ/Ĉ by the delta method. The interval is
// estimate ± z·√Var̂ (z for Confidence, normal approximation as in the
// Ripple Join paper). Without sampling the variance is zero: COUNT is exact
// unless tuples were evicted or lost. A match belongs to the window of the
// later of its two tuples; per-tuple counts m_i and A_i are kept for the
// window of the tuple's latest match (a tuple whose matches alternate
// between two windows restarts its counts, which understates Q slightly).
//
// # Fault tolerance
//
// The divergence is the number of tuples buffered or removed since the last
// backup (the size of the difference between the two tuple sets; for the
// paper, the difference in number of tuples). A delta backup carries the
// new front of the ring, the tuples added since, the counts of older tuples
// that changed, and the windows' sums. After a recovery, [Join.Widen] widens
// every open window's interval as AF-Stream does for Ripple Join: with n
// samples of which up to λ were lost the half-width grows by √(n/(n−λ)); and
// since a lost tuple takes its matches with it, the high end also rises by λ
// times the estimated matches per sampled tuple (2Ĉ/n), so COUNT and SUM
// intervals stay valid when the recovered estimate is low.
package joins
