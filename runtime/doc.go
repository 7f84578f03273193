// Package runtime is mlstream's engine: named streams, jobs and their
// partitions, bounded queues with backpressure, and the output hub.
//
// Data flow: the api package decodes a request body into JSON values and
// feeds them to a Batch (NewBatch). The batch asks every job that reads the
// stream to extract its own Record from each event (so a bad field rejects
// the whole request before anything is queued), routes records to the job's
// partitions by key hash (round-robin without a key) and Commit reserves
// room in every target queue at once: either the whole request is queued or
// none of it is (ErrBusy, answered with 429).
//
// Each partition is one goroutine that owns its operator (no locks on the
// hot path), takes whole batches from its queue, and sends outputs to the
// Hub. A partition is addressed by (job, partition index) everywhere:
// queues, sequence numbers, stats and, later, backups; that is what lets a
// cluster mode move a partition to another process.
package runtime
