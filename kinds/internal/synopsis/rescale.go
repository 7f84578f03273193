package synopsis

// Rescaling (runtime.Rescaling) of the synopsis kinds.

// summary is the part's Summary, for Inherit: every partition of these
// kinds embeds one.
func (p *Summary[S, W]) summary() *Summary[S, W] { return p }

// Inherit hands the new part 0 of a rescaled job, of parts to, what the
// old parts, from, knew besides their sketches: α (the most values one
// event had) and the values of events lost in crashes. from is only read.
func Inherit[S any, W Windowed[S], P interface{ summary() *Summary[S, W] }](from, to []P) {
	dst := to[0].summary()
	var lost uint64
	for _, p := range from {
		o := p.summary()
		dst.maxVals.Store(max(dst.maxVals.Load(), o.maxVals.Load()))
		o.pub.Lock()
		lost += o.pub.lostValues
		o.pub.Unlock()
	}
	dst.AddLostValues(lost)
}
