package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/runtime"
)

// exampleServer starts an mlstream server in process (api.New on a
// runtime.Engine, behind httptest.NewServer) and returns its URL; the
// examples talk to it as to any other.
func exampleServer() (url string, stop func()) {
	s, stop := startServer(nil, runtime.Config{}, nil)
	return s.http.URL, stop
}

// exampleClient is a Client of an exampleServer, with a context that ends
// in 30s; stop stops both.
func exampleClient() (*client.Client, context.Context, func()) {
	url, stopServer := exampleServer()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	c, err := client.New(url, client.Config{})
	if err != nil {
		log.Fatal(err)
	}
	return c, ctx, func() { cancel(); stopServer() }
}

// trainingEvents are labelled events: "free" and "winner" mark spam.
func trainingEvents(n int) []byte {
	evs := make([]any, n)
	for i := range evs {
		words, label := []string{"meeting", "tomorrow"}, 0
		if i%2 == 1 {
			words, label = []string{"free", "winner"}, 1
		}
		evs[i] = map[string]any{"key": fmt.Sprintf("u%d", i), "label": label, "features": words}
	}
	body, err := client.NDJSON(evs...)
	if err != nil {
		log.Fatal(err)
	}
	return body
}

// Post labelled events to a stream, wait until the job has learned them,
// and ask for predictions.
func Example() {
	url, stop := exampleServer()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.New(url, client.Config{Token: "my-token"})
	if err != nil {
		log.Fatal(err)
	}
	created, err := c.PutJob(ctx, client.JobSpec{Name: "spam", Kind: "logreg", Input: "mail", Partitions: 1})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", created)

	ing, err := c.PostEvents(ctx, "mail", trainingEvents(200))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("accepted:", ing.Accepted)

	// Learning is asynchronous: wait until the model has seen every event.
	for {
		m, err := c.Model(ctx, "spam", client.ModelOptions{})
		if err != nil {
			log.Fatal(err)
		}
		if m.Metrics.All.Count == 200 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	preds, err := c.Predict(ctx, "spam",
		map[string]any{"key": "a", "features": []string{"free", "winner"}},
		map[string]any{"key": "b", "features": []string{"meeting", "tomorrow"}},
	)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range preds.Predictions {
		fmt.Printf("%s: spam %v\n", p.Key, p.P > 0.5)
	}
	// Output:
	// created: true
	// accepted: 200
	// a: spam true
	// b: spam false
}

// Count the most frequent values of a field with a heavy_hitters job.
func ExampleClient_TopK() {
	c, ctx, stop := exampleClient()
	defer stop()
	if _, err := c.PutJob(ctx, client.JobSpec{Name: "pages", Kind: "heavy_hitters", Input: "clicks", Params: map[string]any{"field": "page", "k": 2}}); err != nil {
		log.Fatal(err)
	}
	var evs []any
	for i := range 60 {
		page := []string{"/home", "/home", "/home", "/cart", "/cart", "/help"}[i%6]
		evs = append(evs, map[string]any{"page": page})
	}
	body, _ := client.NDJSON(evs...)
	if _, err := c.PostEvents(ctx, "clicks", body); err != nil {
		log.Fatal(err)
	}
	var top *client.TopK
	var err error
	for top == nil || top.Total < 60 { // counting is asynchronous
		if top, err = c.TopK(ctx, "pages", 0, client.WindowCurrent); err != nil {
			log.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, it := range top.Items {
		fmt.Printf("%s %d (between %d and %d)\n", it.Key, it.Estimate, it.Lower, it.Upper)
	}
	// Output:
	// /home 30 (between 30 and 30)
	// /cart 20 (between 20 and 20)
}

// Follow a job's predictions live over the WebSocket feed.
func ExampleClient_Subscribe() {
	c, ctx, stop := exampleClient()
	defer stop()
	if _, err := c.PutJob(ctx, client.JobSpec{Name: "spam", Kind: "logreg", Input: "mail", Partitions: 1}); err != nil {
		log.Fatal(err)
	}
	// WaitSubscribed: the feed sees the events posted once Subscribe returns.
	sub, err := c.Subscribe(ctx, client.SubscribeOptions{Jobs: []string{"spam"}, Types: []string{client.TypePrediction}, WaitSubscribed: true})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	if _, err := c.PostEvents(ctx, "mail", trainingEvents(3)); err != nil {
		log.Fatal(err)
	}
	for range 3 {
		m, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		p, err := m.Prediction()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %s: label %d, learned after predicting\n", m.Job, p.Key, *p.Label)
	}
	// Output:
	// spam u0: label 0, learned after predicting
	// spam u1: label 1, learned after predicting
	// spam u2: label 0, learned after predicting
}

// Stream many events: a Sender batches them, keeps two requests in flight
// and retries what the server asks to retry.
func ExampleClient_NewSender() {
	c, ctx, stop := exampleClient()
	defer stop()
	if _, err := c.PutJob(ctx, client.JobSpec{Name: "users", Kind: "distinct", Input: "visits", Params: map[string]any{"field": "user"}}); err != nil {
		log.Fatal(err)
	}
	s := c.NewSender(ctx, "visits", client.SenderConfig{MaxEvents: 100})
	for i := range 1000 {
		if err := s.Add(map[string]any{"user": fmt.Sprintf("user-%d", i%250)}); err != nil {
			log.Fatal(err)
		}
	}
	if err := s.Close(); err != nil { // sends the rest and waits
		log.Fatal(err)
	}
	fmt.Println("accepted:", s.Stats().Accepted)
	// Output:
	// accepted: 1000
}
