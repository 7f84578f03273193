package learners

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// marshalV1 writes a Progressive as version 1 of the backup format did
// (before the decision counts and calibration).
func marshalV1(p *Progressive) []byte {
	b := p.appendHeader(nil)
	for _, a := range []*agg{&p.all, &p.recent, &p.merged} {
		b = appendAggV1(b, a)
	}
	for _, e := range p.ring {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(e.loss))
		b = binary.LittleEndian.AppendUint16(b, e.bin)
		b = append(b, e.flags, 0)
	}
	return b
}

// An old backup restores: the measures it had are exact, the new ones are
// within a bin's width of the truth, and events leaving the window later
// never drive a count below zero.
func TestProgressiveRestoresV1(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var events []obs
	p := NewProgressive(64)
	for range 200 {
		e := obs{r.Float64(), r.IntN(3) == 0}
		events = append(events, e)
		p.Observe(e.p, e.label)
	}
	q := NewProgressive(64)
	if err := q.UnmarshalBinary(marshalV1(p)); err != nil {
		t.Fatal(err)
	}
	got, want := q.Summary(), p.Summary()
	for _, w := range []struct {
		name      string
		got, want Measures
	}{{"all", got.All, want.All}, {"recent", got.Recent, want.Recent}} {
		g, x := w.got, w.want
		if g.Count != x.Count || g.Positives != x.Positives || g.Accuracy != x.Accuracy || g.AUC != x.AUC {
			t.Errorf("%s: old measures changed: %+v, want %+v", w.name, g, x)
		}
		// Decisions differ only for events in [0.5, 0.5+1/1024).
		if g.TP+g.FP+g.FN+g.TN != g.Count || g.TP+g.FN != g.Positives {
			t.Errorf("%s: decision counts %d/%d/%d/%d do not add up", w.name, g.TP, g.FP, g.FN, g.TN)
		}
		var n int64
		for i, c := range g.Calibration {
			n += c.Count
			if d := math.Abs(c.MeanPredicted - x.Calibration[i].MeanPredicted); d > 0.1 {
				t.Errorf("%s: bin %d mean %v, want about %v", w.name, i, c.MeanPredicted, x.Calibration[i].MeanPredicted)
			}
		}
		if n != g.Count {
			t.Errorf("%s: calibration holds %d events of %d", w.name, n, g.Count)
		}
	}
	// A full window later every restored event has left it.
	for range 64 {
		q.Observe(0.8, true)
	}
	rec := q.Summary().Recent
	if rec.TP != 64 || rec.FP != 0 || rec.FN != 0 || rec.TN != 0 || rec.Calibration[8].Count != 64 {
		t.Fatalf("after the window turned over: %+v", rec)
	}
	for i, c := range rec.Calibration {
		if i != 8 && (c.Count != 0 || c.MeanPredicted != 0) {
			t.Fatalf("bin %d kept %+v from the old backup", i, c)
		}
	}
}

// An unknown version is refused, not misread.
func TestProgressiveUnknownVersion(t *testing.T) {
	p := NewProgressive(4)
	data, _ := p.MarshalBinary()
	binary.LittleEndian.PutUint32(data[4:], 3)
	if err := p.UnmarshalBinary(data); err == nil {
		t.Fatal("version 3 accepted")
	}
}
