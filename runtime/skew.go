package runtime

// SkewStatus says how unevenly a job's partitions are loaded.
type SkewStatus struct{}

func (j *Job) skew() *SkewStatus { return nil }
