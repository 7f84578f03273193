package tmpdeps

import (
	_ "github.com/cespare/xxhash/v2"
	_ "github.com/go-chi/chi/v5"
	_ "github.com/gorilla/websocket"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/valyala/fastjson"
	_ "golang.org/x/sync/semaphore"
	_ "sigs.k8s.io/yaml"
)
