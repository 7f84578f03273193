package learners

import (
	"errors"
	"math"
	"testing"
)

func TestValidate(t *testing.T) {
	f := false
	cases := []struct {
		name  string
		cfg   Config
		param string // "" = valid
		msg   string
	}{
		{"zero is default", Config{}, "", ""},
		{"defaults", DefaultConfig(), "", ""},
		{"full", Config{HashBits: 28, Optimizer: "sgd", Alpha: 1, Beta: 2, L1: 1, L2: 1, Clip: 5, Normalize: "log1p_l2", Adaptive: &f, Window: 1}, "", ""},
		{"hash bits high", Config{HashBits: 40}, "hash_bits", "must be in [1, 28], got 40"},
		{"hash bits negative", Config{HashBits: -1}, "hash_bits", "must be in [1, 28], got -1"},
		{"optimizer", Config{Optimizer: "adam"}, "optimizer", `must be one of "sgd", "adagrad", "ftrl", got "adam"`},
		{"alpha negative", Config{Alpha: -0.1}, "alpha", "must be > 0, got -0.1"},
		{"alpha NaN", Config{Alpha: math.NaN()}, "alpha", "must be finite, got NaN"},
		{"beta", Config{Beta: -1}, "beta", "must be >= 0, got -1"},
		{"l1", Config{L1: -1}, "l1", "must be >= 0, got -1"},
		{"l2", Config{L2: math.Inf(1)}, "l2", "must be finite, got +Inf"},
		{"clip", Config{Clip: -2}, "clip", "must be >= 0, got -2"},
		{"normalize", Config{Normalize: "l1"}, "normalize", `must be one of "sqrt", "none", "l2", "log1p_l2", got "l1"`},
		{"window", Config{Window: -5}, "window", "must be >= 1, got -5"},
		{"first bad field wins", Config{HashBits: 99, Window: -1}, "hash_bits", "must be in [1, 28], got 99"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.param == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				if _, err := NewModel(tc.cfg); err != nil {
					t.Fatal(err)
				}
				return
			}
			var pe *ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v, want *ParamError", err)
			}
			if pe.Param != tc.param || pe.Msg != tc.msg {
				t.Errorf("got %q %q, want %q %q", pe.Param, pe.Msg, tc.param, tc.msg)
			}
			if _, err := NewModel(tc.cfg); !errors.As(err, &pe) {
				t.Errorf("NewModel accepted a bad config")
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	c := DefaultConfig()
	if c.HashBits != 20 || c.Optimizer != "ftrl" || c.Alpha != 0.3 || c.Beta != 1 ||
		c.Normalize != "sqrt" || !c.IsAdaptive() || c.Window != 10000 {
		t.Errorf("defaults %+v", c)
	}
	if a := (Config{Optimizer: "adagrad"}); true {
		a.EnsureDefaults()
		if a.Alpha != 0.2 {
			t.Errorf("adagrad alpha %v", a.Alpha)
		}
	}
	// The model keeps its own copy of Adaptive.
	on := true
	m, _ := NewModel(Config{Adaptive: &on})
	on = false
	if !m.Config().IsAdaptive() {
		t.Error("model shares the caller's Adaptive pointer")
	}
}
