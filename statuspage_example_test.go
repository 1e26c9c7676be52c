package etl_test

import (
	"net/http"

	"github.com/openetl/etl"
)

// The status page of two pipelines, mounted beside the host's own
// handlers: the page at /debug/etl/, its figures at
// /debug/etl/status.json. Put it behind the host's authentication when
// the port is reachable from outside.
func ExampleStatusPage() {
	var orders, customers *etl.Pipeline // built with etl.NewPipeline(...).Build()
	mux := http.NewServeMux()
	mux.Handle("/debug/etl/", etl.StatusPage(orders, customers))
	mux.Handle("/healthz", etl.HealthHandler(orders))
	_ = http.ListenAndServe("127.0.0.1:8080", mux)
}
