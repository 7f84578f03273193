package runtime

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/valyala/fastjson"
)

// Limits bound the numbers an event may carry. A value outside them is
// refused with a 400 naming the field: fastjson reads 1e400 as +Inf, and
// a single infinite feature value turns every weight it touches into NaN,
// so a number is checked where it enters, not where it does harm.
type Limits struct {
	// MaxValue bounds the magnitude of a feature value and of any other
	// number a kind reads (ExtractNumber; default 1e12). Any finite value under it keeps a model's
	// state finite: products and squares stay far below the float64
	// range.
	MaxValue float64
	// MinTS and MaxTS bound an event time, in epoch milliseconds (default
	// 1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z).
	MinTS, MaxTS int64
}

// Default limits.
const (
	DefaultMaxValue = 1e12
	DefaultMinTS    = 0
	DefaultMaxTS    = 253402300799999 // 9999-12-31T23:59:59.999Z
)

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{MaxValue: DefaultMaxValue, MinTS: DefaultMinTS, MaxTS: DefaultMaxTS}
}

var limits atomic.Pointer[Limits]

func init() {
	l := DefaultLimits()
	limits.Store(&l)
}

// SetLimits replaces the limits for every engine of the process (they are
// a property of the input format, like the JSON grammar). It refuses
// limits that are not finite, or under which nothing could pass.
func SetLimits(l Limits) error {
	if !(l.MaxValue > 0) || math.IsInf(l.MaxValue, 0) || l.MaxValue > 1e100 {
		return fmt.Errorf("runtime: max value must be in (0, 1e100], got %v", l.MaxValue)
	}
	if l.MinTS > l.MaxTS {
		return fmt.Errorf("runtime: min ts %d is after max ts %d", l.MinTS, l.MaxTS)
	}
	limits.Store(&l)
	return nil
}

// CurrentLimits returns the limits in force.
func CurrentLimits() Limits { return *limits.Load() }

// boundedNumber reads x (a JSON number) as a float64 within ±max: not a
// number (NaN, an unparsable literal) and infinities are refused too.
func boundedNumber(x *fastjson.Value, field string, max float64) (float64, error) {
	f, err := x.Float64()
	if err != nil || math.IsNaN(f) {
		return 0, badField(field, "not a valid number: %s", shortJSON(x))
	}
	if !(math.Abs(f) <= max) {
		return 0, badField(field, "magnitude over the limit of %g: %s", max, shortJSON(x))
	}
	return f, nil
}

// shortJSON is x's JSON text for an error message, cut short: fastjson
// takes any run of digits, signs and exponents for a number, and a value
// may be as large as an event.
func shortJSON(x *fastjson.Value) string {
	s := x.String()
	if len(s) > 32 {
		s = s[:32] + "…"
	}
	return s
}
