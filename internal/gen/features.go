package gen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/mlstream/mlstream/learners"
)

// FeatureEvents returns n hashed events of exactly 20 non-zero features,
// for speed measurements: 16 distinct words drawn Zipf(1.1) from a
// vocabulary of vocab words (one-hot) plus 4 numeric fields with raw,
// unscaled values, labelled by a hidden linear model. Deterministic.
func FeatureEvents(n, vocab int) ([][]learners.Feature, []bool) {
	r := rand.New(rand.NewPCG(42, 43))
	cdf := make([]float64, vocab)
	var s float64
	for k := range cdf {
		s += math.Pow(float64(k+1), -1.1)
		cdf[k] = s
	}
	words := make([]uint64, vocab)
	wts := make([]float64, vocab)
	for k := range words {
		words[k] = learners.HashName(fmt.Sprintf("word%d", k))
		wts[k] = r.NormFloat64()
	}
	nums := []uint64{learners.HashName("amount"), learners.HashName("links"), learners.HashName("age"), learners.HashName("score")}
	feats := make([][]learners.Feature, n)
	labels := make([]bool, n)
	for i := range feats {
		f := make([]learners.Feature, 0, 20)
		var z float64
		var picked []int
		for len(picked) < 16 {
			k, _ := slices.BinarySearch(cdf, r.Float64()*s)
			k = min(k, vocab-1)
			if slices.Contains(picked, k) {
				continue
			}
			picked = append(picked, k)
			f = append(f, learners.Feature{Hash: words[k], Value: 1})
			z += wts[k] / 4
		}
		for j, h := range nums {
			v := math.Round(r.ExpFloat64() * math.Pow(10, float64(j)))
			if v == 0 {
				v = 1
			}
			f = append(f, learners.Feature{Hash: h, Value: v})
		}
		feats[i] = f
		labels[i] = r.Float64() < 1/(1+math.Exp(-z))
	}
	return feats, labels
}
