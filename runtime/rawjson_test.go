package runtime

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fastjson/fastfloat"
)

// checkRawNumber: a number RawScan reads whole has fastjson's value, to
// the bit, and fastjson reads it without error.
func checkRawNumber(t *testing.T, text string) {
	t.Helper()
	var s RawScan
	s.Reset([]byte(text))
	k, raw := s.Value()
	if k != RawNumber || len(raw) != len(text) {
		return
	}
	want, err := fastfloat.Parse(text)
	if err != nil {
		t.Fatalf("RawScan read %q, which fastfloat refuses: %v", text, err)
	}
	got, ok := RawNumberValue(raw, math.Inf(1))
	if !ok && !math.IsNaN(want) || math.Float64bits(got) != math.Float64bits(want) {
		t.Fatalf("%q: RawScan %v (ok %v), fastfloat %v", text, got, ok, want)
	}
}

func TestRawNumbersHaveFastjsonsValues(t *testing.T) {
	for _, text := range []string{"0", "-0", "1", "-1", "0.5", "-0.0", "12.5", "123456789012345", "1234567890123456",
		"0.00000000000001", "0.000000000000001", "99999999999999.9", "9007199254740993", "1e5", "1E-5", "-2.5e+3",
		"1e400", "123456789012345678901234567890", "0.1", "0.3", "3.0000000000000004"} {
		checkRawNumber(t, text)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		var b strings.Builder
		if r.IntN(2) == 0 {
			b.WriteByte('-')
		}
		b.WriteString(strconv.FormatUint(r.Uint64N(1e9)>>r.IntN(30), 10))
		if r.IntN(2) == 0 {
			b.WriteByte('.')
			for range 1 + r.IntN(12) {
				b.WriteByte(byte('0' + r.IntN(10)))
			}
		}
		checkRawNumber(t, b.String())
	}
}

// The scan refuses what is not JSON's spelling of a number, though
// fastjson takes some of it for one.
func TestRawScanRefusesLooseNumbers(t *testing.T) {
	for _, text := range []string{"-", "+1", ".5", "1.", "1e", "1e+", "-x", "01", "1.2.3", "00", "1x", "-.5"} {
		var s RawScan
		s.Reset([]byte(text))
		if k, raw := s.Value(); k == RawNumber && len(raw) == len(text) {
			t.Errorf("%q read as a number", text)
		}
	}
}

func FuzzRawNumber(f *testing.F) {
	for _, s := range []string{"0", "-1.5", "1e3", "123456789012345.6", "0.000001"} {
		f.Add(s)
	}
	f.Fuzz(checkRawNumber)
}
