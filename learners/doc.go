// Package learners holds the online learners of mlstream: binary logistic
// regression on hashed sparse features, trained one event at a time, with
// progressive validation metrics.
//
// # Features
//
// An event is a slice of [Feature] values: the 64-bit xxhash of a feature
// name ([HashName], or [HashNameValue] for the one-hot feature "name=value")
// and a value. The low HashBits bits of the hash select one of 2^HashBits
// weight slots (the hashing trick); an extra slot past them holds the
// intercept, which every prediction and update includes with value 1, so the
// bias never collides with a feature.
//
// # Parameter-server design
//
// A [Model] is the versioned global model shared by all partitions of a job.
// It is safe for concurrent use and lock-free: per weight slot it keeps the
// optimizer state (FTRL-Proximal: z and n; AdaGrad: w and the sum of squared
// gradients; SGD: w) and the inverse of a per-feature scale, as float64 bits
// in one []uint64 read and written only with sync/atomic. The words of one
// slot are adjacent (four uint64 per slot, 32-byte aligned), so an update to
// one feature touches one cache line. On Linux the table is advised to use
// transparent huge pages, since hashed slots would otherwise cost a TLB miss
// per feature.
//
// Each partition trains a [Learner], a replica owned by one goroutine. Its
// view of a weight is the global state plus its own local delta, kept in a
// small hash table of the slots touched since the last sync (so a Learner
// costs memory in proportion to the features it saw, not 2^HashBits);
// learning only writes the delta. [Learner.Sync] pushes every delta into the global
// model with atomic float additions, clears it and bumps the model version.
// The global optimizer state is therefore the sum of the increments of all
// partitions. For FTRL and AdaGrad the state is itself a sum of
// per-update increments (z, n, sum of squared gradients), so the merged model
// equals serial training over the interleaved stream except that each
// partition computed its increments against a view that was stale by at most
// the other partitions' unsynced updates (asynchronous parameter server, as in
// Hogwild! and Downpour SGD). What the design notes call "averaging the
// partition models" is this aggregation of updates: summing increments rather
// than averaging weights keeps the per-coordinate learning rates right, and a
// partition that saw more data contributes more. Between syncs a Learner
// already reads the global state live, so it sees other partitions' synced
// work at once.
//
// # Normalized adaptive updates
//
// With Config.Adaptive (the default) the learner uses the normalized updates
// of Vowpal Wabbit: it keeps per feature a scale s_i = max |x_i| seen (a
// global atomic maximum), the optimizer learns on x_i/s_i, and the effective
// weight is w_i/s_i. When s_i grows from s to s' the optimizer state is
// rescaled so that the effective weight is unchanged: for FTRL z is
// multiplied by s'/s (exact when L1 = 0; with L1 the shift by L1 is kept
// exact on the global state) while n is kept, which leaves the learning rate
// of that coordinate slightly conservative; for AdaGrad and SGD w is
// multiplied by s'/s. The rescale is applied atomically to the global slot
// and to the local delta of the learner that saw the larger value. Other
// partitions' unsynced deltas for that slot stay in the old scale until their
// next sync, which is the approximation the design accepts. This makes the
// default settings learn well from raw, unscaled inputs (amounts in the
// thousands next to one-hot features of value 1) without any preprocessing.
//
// # Shared models
//
// In cluster mode several processes hold a copy of one model. A shared
// Learner ([Learner.SetShared]) never writes its model: [Learner.AppendDelta]
// encodes its updates as a delta, and every copy applies every delta in
// one order with [Model.ApplyDelta], so the copies stay equal bit for bit.
// Adaptive scales travel in the deltas too (share.go).
//
// # Progressive validation
//
// [Learner.Learn] first predicts with the current view and then learns, so
// the returned probability is an honest out-of-sample prediction. Feed it to
// a [Progressive] to get accuracy, log loss and AUC over the whole run and a
// recent window. Progressive values of several partitions can be merged.
//
// Everything here is a plain value: no clock, disk or network. The runtime
// drives it, so the learner stays deterministic and is tested without I/O.
package learners
