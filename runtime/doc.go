// Package runtime is mlstream's engine: named streams, jobs and their
// partitions, bounded queues with backpressure and load shedding, group
// scheduling of coordination, fault tolerance, and the output hub.
//
// What a job computes is its kind's: kinds are packages (under kinds/)
// that implement the seam of kind.go and Register themselves; the engine
// names none of them.
//
// Data flow: the api package decodes a request body into JSON values and
// feeds them to a Batch (NewBatch). The batch asks every job that reads the
// stream (a kind of two streams learns from the stream which side an
// event is) to extract its own Record from each event (so a bad field
// rejects the whole request before anything is queued), routes records to the job's
// partitions by key hash (round-robin without a key), sheds part of them
// when the job has load shedding and its queue would hold more than it
// drains in max_delay (shed.go), and Commit reserves room in every target
// queue at once: either the whole request is queued or none of it is
// (ErrBusy, answered with 429).
//
// Each partition is one goroutine that owns its operator (no locks on the
// hot path), takes whole batches from its queue, and sends outputs to the
// Hub. Coordination — merging a partition into a global model, publishing
// a partition's state for queries — happens once per group
// of batches whose size adapts to its measured cost (group.go, after
// Drizzle), paced across partitions by the job's consistency model
// (consistency.go). Fault tolerance (ftjob.go, ftrecover.go) follows
// AF-Stream: units of state backed up when they diverged past θ, item logs
// past l, recovery with the loss measured by sequence numbers.
//
// A job's partition count can change while it runs (rescale.go): ingest
// is held, the partitions stop at a group boundary, the kind moves its
// state by key to a new set of partitions (Rescaling), and with fault
// tolerance the new layout is backed up before it becomes the job's. An
// autoscaler (autoscale.go) chooses the count from the input rate and the
// partitions' true rate; skew.go shows how unevenly they are loaded.
//
// A partition is addressed by (job, partition index) everywhere: queues,
// sequence numbers, stats and backups; that is what lets a cluster mode
// move a partition to another process.
package runtime
