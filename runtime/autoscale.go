package runtime

// AutoscaleStatus is the autoscaler's view in a job status.
type AutoscaleStatus struct{}

type autoscaler struct{}

func (a *autoscaler) status() *AutoscaleStatus { return &AutoscaleStatus{} }
