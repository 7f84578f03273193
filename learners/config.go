package learners

import (
	"fmt"
	"math"
)

// Optimizer names accepted in Config.Optimizer.
const (
	OptimizerSGD     = "sgd"
	OptimizerAdaGrad = "adagrad"
	OptimizerFTRL    = "ftrl"
)

// Normalization names accepted in Config.Normalize.
const (
	NormalizeNone    = "none"
	NormalizeSqrt    = "sqrt"
	NormalizeL2      = "l2"
	NormalizeLog1pL2 = "log1p_l2"
)

// Config holds the parameters of a logistic regression model. Any zero field
// means "use the default" (see EnsureDefaults), so a zero Config is valid.
// The snake_case names in comments are the job parameter names, also used in
// ParamError.Param.
type Config struct {
	// HashBits (hash_bits) is log2 of the number of weight slots, in
	// [1, 28]. Default 20: about a million slots (32 MiB of global state,
	// 16 MiB per Learner), so a vocabulary of ~10^5 features collides rarely.
	HashBits int

	// Optimizer (optimizer) is "ftrl" (FTRL-Proximal, default: per-coordinate
	// rates, sparse with L1), "adagrad" or "sgd" (step Alpha/sqrt(t), with t
	// the number of labelled events the model has learned). sgd is a
	// baseline: its global step decays for rare features as fast as for
	// frequent ones, so on sparse data it stays well below the others.
	Optimizer string

	// Alpha (alpha) is the learning rate. Default 0.3 for ftrl and 0.2 for
	// adagrad and sgd: the best values on the generated stream of
	// internal/gen (200k events, default adaptive updates), where ftrl with
	// 0.1 ends 1.2 points of accuracy below the true model and with 0.3
	// 0.6 points. With adaptive updates inputs are in [-1, 1] per feature,
	// so these defaults carry over to other data.
	Alpha float64

	// Beta (beta) is FTRL's beta (smooths the per-coordinate rate at the
	// start). Default 1. Ignored by the other optimizers.
	Beta float64

	// L1 (l1) and L2 (l2) are the regularization strengths; default 0.
	L1, L2 float64

	// Clip (clip) bounds the absolute gradient per coordinate; 0 = no
	// clipping.
	Clip float64

	// Normalize (normalize) is the input normalization: "sqrt" (default:
	// a value v with |v| > 1 becomes sign(v)*sqrt(|v|), one in [-1, 1] is
	// kept), "none", "l2" (divide the values by the event's L2 norm) or
	// "log1p_l2" (v -> sign(v)*log1p(|v|), then l2). The bias is never
	// normalized. sqrt tames large counts and amounts (word counts, sums of
	// money) whose largest value would otherwise set the adaptive scale,
	// and leaves one-hot, boolean and already scaled features alone; it is
	// per value, nothing learned from other events. Left empty, a model
	// reading a snapshot takes the snapshot's normalization (see
	// Model.ReadFrom): the default before sqrt was none.
	Normalize string

	// Adaptive (adaptive) switches the normalized adaptive updates (see the
	// package doc): nil or true (default) on, false off.
	Adaptive *bool

	// Window (window) is the number of events in the recent window of the
	// progressive metrics (see NewProgressive); default 10000.
	Window int
}

// Default values of Config fields.
const (
	DefaultHashBits = 20
	DefaultWindow   = 10000
)

// DefaultConfig returns a Config with every field set to its default.
func DefaultConfig() Config {
	var c Config
	c.EnsureDefaults()
	return c
}

// EnsureDefaults fills the zero fields of c with their defaults.
func (c *Config) EnsureDefaults() {
	if c.HashBits == 0 {
		c.HashBits = DefaultHashBits
	}
	if c.Optimizer == "" {
		c.Optimizer = OptimizerFTRL
	}
	if c.Alpha == 0 {
		if c.Optimizer == OptimizerFTRL {
			c.Alpha = 0.3
		} else {
			c.Alpha = 0.2
		}
	}
	if c.Beta == 0 {
		c.Beta = 1
	}
	if c.Normalize == "" {
		c.Normalize = NormalizeSqrt
	}
	if c.Adaptive == nil {
		t := true
		c.Adaptive = &t
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
}

// IsAdaptive reports whether normalized adaptive updates are on.
func (c Config) IsAdaptive() bool { return c.Adaptive == nil || *c.Adaptive }

// ParamError reports an invalid Config field. Param is the snake_case
// parameter name (hash_bits, optimizer, alpha, beta, l1, l2, clip, normalize,
// adaptive, window).
type ParamError struct {
	Param string
	Msg   string
}

func (e *ParamError) Error() string { return "learners: invalid " + e.Param + ": " + e.Msg }

// Validate checks c and returns a *ParamError for the first bad field. Zero
// fields are valid: they mean the default.
func (c Config) Validate() error {
	c.EnsureDefaults()
	if c.HashBits < 1 || c.HashBits > 28 {
		return &ParamError{"hash_bits", fmt.Sprintf("must be in [1, 28], got %d", c.HashBits)}
	}
	switch c.Optimizer {
	case OptimizerSGD, OptimizerAdaGrad, OptimizerFTRL:
	default:
		return &ParamError{"optimizer", fmt.Sprintf("must be one of \"sgd\", \"adagrad\", \"ftrl\", got %q", c.Optimizer)}
	}
	if err := positive("alpha", c.Alpha, false); err != nil {
		return err
	}
	if err := positive("beta", c.Beta, true); err != nil {
		return err
	}
	if err := positive("l1", c.L1, true); err != nil {
		return err
	}
	if err := positive("l2", c.L2, true); err != nil {
		return err
	}
	if err := positive("clip", c.Clip, true); err != nil {
		return err
	}
	switch c.Normalize {
	case NormalizeSqrt, NormalizeNone, NormalizeL2, NormalizeLog1pL2:
	default:
		return &ParamError{"normalize", fmt.Sprintf("must be one of \"sqrt\", \"none\", \"l2\", \"log1p_l2\", got %q", c.Normalize)}
	}
	if c.Window < 1 {
		return &ParamError{"window", fmt.Sprintf("must be >= 1, got %d", c.Window)}
	}
	return nil
}

func positive(name string, v float64, zeroOK bool) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return &ParamError{name, fmt.Sprintf("must be finite, got %v", v)}
	case v < 0 || (v == 0 && !zeroOK):
		if zeroOK {
			return &ParamError{name, fmt.Sprintf("must be >= 0, got %v", v)}
		}
		return &ParamError{name, fmt.Sprintf("must be > 0, got %v", v)}
	}
	return nil
}
