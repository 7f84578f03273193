// Package gen generates a realistic labelled event stream (spam or
// click-like) with a known true model, for the demo, tests and benchmarks.
//
// Each event has unscaled numeric fields ("amount" 0..5000, "word_count"
// 0..500, "links" 0..20), categorical fields ("country", "device", "hour"),
// a boolean ("returning") and a bag of words drawn Zipf-like from a
// vocabulary of pronounceable made-up words. The label is drawn from a true
// logistic model over exactly the features a learner sees (Event.Features),
// with a seeded random weight vector and a bias, so TrueP is the best
// probability any learner can predict: the true model's accuracy, the mean
// of (TrueP > 0.5) == Label, is about 0.85. After Config.DriftAfter events
// the generator switches to a second weight vector (a third of the word
// weights and the weights of "amount" and "returning" change sign, like a
// new spam campaign), so a learner's accuracy visibly drops (by about 20
// points) and then recovers most of the loss within tens of thousands of
// events. The events themselves (fields, words) do not change at the drift.
//
// A Generator is a plain value: deterministic for a seed, with no clock
// (timestamps advance by about 10 ms per event from 2024-01-01T00:00:00Z).
//
// Demo wraps a Generator for `mlstream demo`: click ids, purchases that
// name their click, totals to check a join against, and a position that
// can be saved and restored. JoinEvents makes a plain two-stream join
// workload with a known COUNT.
package gen

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/mlstream/mlstream/learners"
)

// Config configures a Generator. Zero fields mean the default.
type Config struct {
	Seed       int64 // seed of every random choice, including the true model
	DriftAfter int   // events after which the true model changes; 0 = never
	Vocabulary int   // distinct words; default 2000
	Words      int   // mean words per event; default 12
}

// Default values of Config fields.
const (
	DefaultVocabulary = 2000
	DefaultWords      = 12
)

// Field names of the generated events.
const (
	FieldAmount    = "amount"
	FieldWordCount = "word_count"
	FieldLinks     = "links"
	FieldCountry   = "country"
	FieldDevice    = "device"
	FieldHour      = "hour"
	FieldReturning = "returning"
)

// StartTS is the timestamp of the first event (epoch ms of 2024-01-01T00:00:00Z).
const StartTS = 1704067200000

var (
	countries      = []string{"us", "de", "gb", "fr", "in", "br", "jp", "ng", "ru", "es"}
	countryWeights = []float64{30, 12, 10, 8, 10, 7, 6, 6, 6, 5}
	devices        = []string{"mobile", "desktop", "tablet"}
	deviceWeights  = []float64{55, 35, 10}
	hours          = func() []string {
		h := make([]string, 24)
		for i := range h {
			h[i] = strconv.Itoa(i)
		}
		return h
	}()
	syllables = []string{"ka", "lo", "mi", "ne", "ru", "so", "ta", "vi", "ze", "po",
		"fa", "gu", "be", "do", "hi", "ja", "ke", "ly", "mo", "nu"}
)

// trueModel holds the weights of the true logistic model; numeric weights
// apply to raw values.
type trueModel struct {
	bias                    float64
	amount, wordCount, link float64
	returning               float64
	country, device, hour   []float64
	words                   []float64
}

// Generator produces events. It is not safe for concurrent use.
type Generator struct {
	cfg     Config
	src     *rand.PCG // rng's source, whose state State saves
	rng     *rand.Rand
	n       int
	vocab   []string
	wordCDF []float64
	userCDF []float64
	models  [2]trueModel
	cCDF    []float64
	dCDF    []float64
}

// New returns a generator for cfg.
func New(cfg Config) *Generator {
	if cfg.Vocabulary <= 0 {
		cfg.Vocabulary = DefaultVocabulary
	}
	if cfg.Words <= 0 {
		cfg.Words = DefaultWords
	}
	seed := uint64(cfg.Seed)
	src := rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
	g := &Generator{
		cfg:     cfg,
		src:     src,
		rng:     rand.New(src),
		vocab:   make([]string, cfg.Vocabulary),
		wordCDF: zipfCDF(cfg.Vocabulary, 1.0, 3),
		userCDF: zipfCDF(10000, 1.1, 1),
		cCDF:    cdf(countryWeights),
		dCDF:    cdf(deviceWeights),
	}
	for i := range g.vocab {
		g.vocab[i] = word(i)
	}
	// The true model has its own stream so that changing it never changes
	// the events drawn.
	mr := rand.New(rand.NewPCG(seed^0x5851f42d4c957f2d, seed+1))
	m := &g.models[0]
	m.amount = sign(mr) * 0.8 / 400    // amount ~ hundreds
	m.wordCount = sign(mr) * 0.6 / 150 // word_count ~ 100
	m.link = sign(mr) * 0.25           // links ~ 2
	m.returning = sign(mr) * 0.8
	m.country = normals(mr, len(countries), 0.8)
	m.device = normals(mr, len(devices), 0.5)
	m.hour = normals(mr, 24, 0.3)
	m.words = normals(mr, cfg.Vocabulary, 0.9)
	// Drifted model: a third of the word weights, the amount and the
	// returning flag change sign (a new spam campaign): a learner loses
	// about 20 points of accuracy at once and wins most of them back within
	// a few tens of thousands of events.
	d := &g.models[1]
	*d = *m
	d.amount, d.returning = -m.amount, -m.returning
	d.words = slices.Clone(m.words)
	for i := 0; i < len(d.words); i += 3 {
		d.words[i] = -d.words[i]
	}
	g.center(m)
	g.center(d)
	return g
}

// center sets the bias of m so that about 40% of the events are positive
// whatever the seed: it subtracts the expected margin of the other terms.
func (g *Generator) center(m *trueModel) {
	mean := m.amount*math.Exp(4.6+1.2*1.2/2) + m.wordCount*math.Exp(4.3+0.7*0.7/2) +
		m.link*1.5 + 0.4*m.returning + dot(m.country, g.cCDF) + dot(m.device, g.dCDF) +
		dot(m.hour, cdf(make24()))
	mean += float64(g.cfg.Words) * dot(m.words, g.wordCDF)
	m.bias = math.Log(0.4/0.6) - mean
}

func make24() []float64 {
	w := make([]float64, 24)
	for i := range w {
		w[i] = 1
	}
	return w
}

// dot returns the expectation of w under the distribution with CDF c.
func dot(w, c []float64) float64 {
	var s, prev float64
	for i := range w {
		s += w[i] * (c[i] - prev)
		prev = c[i]
	}
	return s
}

func sign(r *rand.Rand) float64 {
	if r.IntN(2) == 0 {
		return -1
	}
	return 1
}

func normals(r *rand.Rand, n int, sd float64) []float64 {
	w := make([]float64, n)
	for i := range w {
		w[i] = r.NormFloat64() * sd
	}
	return w
}

func cdf(weights []float64) []float64 {
	c := make([]float64, len(weights))
	var s float64
	for i, w := range weights {
		s += w
		c[i] = s
	}
	for i := range c {
		c[i] /= s
	}
	return c
}

// zipfCDF is the CDF of P(rank k) ~ 1/(k+q)^s, k = 0..n-1.
func zipfCDF(n int, s, q float64) []float64 {
	w := make([]float64, n)
	for k := range w {
		w[k] = math.Pow(float64(k)+q, -s)
	}
	return cdf(w)
}

func pick(r *rand.Rand, c []float64) int {
	i, _ := slices.BinarySearch(c, r.Float64())
	return min(i, len(c)-1)
}

// word returns the i-th vocabulary word: i+len(syllables) written in base
// len(syllables) with a syllable per digit, so every word has at least two
// syllables and distinct i give distinct words.
func word(i int) string {
	n := i + len(syllables)
	var digits []int
	for n > 0 {
		digits = append(digits, n%len(syllables))
		n /= len(syllables)
	}
	var b []byte
	for j := len(digits) - 1; j >= 0; j-- {
		b = append(b, syllables[digits[j]]...)
	}
	return string(b)
}

// Word returns the i-th most frequent word of the vocabulary.
func (g *Generator) Word(i int) string { return g.vocab[i] }

// Event is one generated event. Its maps and slices are fresh for every
// event, so callers may keep them.
type Event struct {
	Key     string
	TS      int64 // epoch ms
	Label   bool
	TrueP   float64            // the true model's probability of a positive label
	Numbers map[string]float64 // unscaled numeric fields
	Strings map[string]string  // categorical fields
	Bools   map[string]bool
	Words   []string // bag of words, with repetitions, in drawing order
}

// Count returns the number of events generated so far.
func (g *Generator) Count() int { return g.n }

// Drifted reports whether the next event comes from the drifted true
// model: Config.DriftAfter is set and that many events have been
// generated.
func (g *Generator) Drifted() bool { return g.cfg.DriftAfter > 0 && g.n >= g.cfg.DriftAfter }

// Next returns the next event.
func (g *Generator) Next() Event {
	r := g.rng
	e := Event{
		Key:     "user-" + strconv.Itoa(pick(r, g.userCDF)),
		TS:      StartTS + int64(g.n)*10 + int64(r.IntN(10)),
		Numbers: make(map[string]float64, 3),
		Strings: make(map[string]string, 3),
		Bools:   make(map[string]bool, 1),
	}
	amount := math.Min(math.Exp(4.6+1.2*r.NormFloat64()), 5000)
	amount = math.Round(amount*100) / 100
	wc := math.Min(math.Round(math.Exp(4.3+0.7*r.NormFloat64())), 500)
	links := 0
	for links < 20 && r.Float64() < 0.6 {
		links++
	}
	c, d, h := pick(r, g.cCDF), pick(r, g.dCDF), r.IntN(24)
	ret := r.Float64() < 0.4
	e.Numbers[FieldAmount] = amount
	e.Numbers[FieldWordCount] = wc
	e.Numbers[FieldLinks] = float64(links)
	e.Strings[FieldCountry] = countries[c]
	e.Strings[FieldDevice] = devices[d]
	e.Strings[FieldHour] = hours[h]
	e.Bools[FieldReturning] = ret

	k := g.cfg.Words/2 + r.IntN(g.cfg.Words+1)
	idx := make([]int, k)
	e.Words = make([]string, k)
	for i := range idx {
		idx[i] = pick(r, g.wordCDF)
		e.Words[i] = g.vocab[idx[i]]
	}

	m := &g.models[0]
	if g.Drifted() {
		m = &g.models[1]
	}
	z := m.bias + m.amount*amount + m.wordCount*wc + m.link*float64(links) +
		m.country[c] + m.device[d] + m.hour[h]
	if ret {
		z += m.returning
	}
	for _, i := range idx {
		z += m.words[i]
	}
	e.TrueP = 1 / (1 + math.Exp(-z))
	e.Label = r.Float64() < e.TrueP
	g.n++
	return e
}

// Features appends the event's hashed features to dst and returns it,
// exactly as the service hashes the JSON of AppendJSON: a number v under
// name is Feature{HashName(name), v}; a string v is
// Feature{HashNameValue(name, v), 1}; a bool is Feature{HashName(name), 1}
// when true and skipped when false; a word is Feature{HashName(word), count}
// with count its occurrences in the bag (one feature per distinct word).
// Fields come in sorted name order, then words in first-occurrence order.
func (e Event) Features(dst []learners.Feature) []learners.Feature {
	var buf [16]string
	for _, k := range sortedKeys(e.Numbers, buf[:0]) {
		dst = append(dst, learners.Feature{Hash: learners.HashName(k), Value: e.Numbers[k]})
	}
	for _, k := range sortedKeys(e.Strings, buf[:0]) {
		dst = append(dst, learners.Feature{Hash: learners.HashNameValue(k, e.Strings[k]), Value: 1})
	}
	for _, k := range sortedKeys(e.Bools, buf[:0]) {
		if e.Bools[k] {
			dst = append(dst, learners.Feature{Hash: learners.HashName(k), Value: 1})
		}
	}
	for i, w := range e.Words {
		if n := wordCount(e.Words, i); n > 0 {
			dst = append(dst, learners.Feature{Hash: learners.HashName(w), Value: float64(n)})
		}
	}
	return dst
}

// wordCount returns the occurrences of words[i] in words, or 0 if it
// occurred before i.
func wordCount(words []string, i int) int {
	w := words[i]
	if slices.Contains(words[:i], w) {
		return 0
	}
	n := 1
	for _, o := range words[i+1:] {
		if o == w {
			n++
		}
	}
	return n
}

func sortedKeys[V any](m map[string]V, buf []string) []string {
	for k := range m {
		buf = append(buf, k)
	}
	slices.Sort(buf)
	return buf
}

// AppendJSON appends the event as one JSON object in the service's event
// format and returns the extended buffer:
//
//	{"key":"user-7","ts":1704067200003,"label":1,"features":{"amount":99.5,
//	 "links":2,"word_count":80,"country":"de","device":"mobile","hour":"13",
//	 "returning":true,"kalo":2,"mine":1}}
//
// The service reads "features" as an object or as an array of strings, not
// both, so the bag of words goes into the same object as numeric counts
// under each word's own name ("kalo":2 for two occurrences). Hashing that
// object as the service does gives exactly Features. Vocabulary words never
// equal a field name. TrueP is not written.
func (e Event) AppendJSON(dst []byte) []byte { return e.appendJSON(dst, -1) }

// appendJSON is AppendJSON with a leading "click":click field when click
// is not negative.
func (e Event) appendJSON(dst []byte, click int) []byte {
	dst = append(dst, '{')
	if click >= 0 {
		dst = append(dst, `"click":`...)
		dst = strconv.AppendInt(dst, int64(click), 10)
		dst = append(dst, ',')
	}
	dst = append(dst, `"key":`...)
	dst = appendString(dst, e.Key)
	dst = append(dst, `,"ts":`...)
	dst = strconv.AppendInt(dst, e.TS, 10)
	dst = append(dst, `,"label":`...)
	if e.Label {
		dst = append(dst, '1')
	} else {
		dst = append(dst, '0')
	}
	dst = append(dst, `,"features":{`...)
	first := true
	sep := func(name string) {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendString(dst, name)
		dst = append(dst, ':')
	}
	var buf [16]string
	for _, k := range sortedKeys(e.Numbers, buf[:0]) {
		sep(k)
		dst = strconv.AppendFloat(dst, e.Numbers[k], 'g', -1, 64)
	}
	for _, k := range sortedKeys(e.Strings, buf[:0]) {
		sep(k)
		dst = appendString(dst, e.Strings[k])
	}
	for _, k := range sortedKeys(e.Bools, buf[:0]) {
		sep(k)
		dst = strconv.AppendBool(dst, e.Bools[k])
	}
	for i, w := range e.Words {
		if n := wordCount(e.Words, i); n > 0 {
			sep(w)
			dst = strconv.AppendInt(dst, int64(n), 10)
		}
	}
	return append(dst, "}}"...)
}

// appendString appends s as a JSON string.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x80 {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, `\ufffd`...)
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			dst = append(dst, c)
		}
		i++
	}
	return append(dst, '"')
}
