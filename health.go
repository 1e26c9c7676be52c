package etl

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// HealthHandler returns an http.Handler that serves Kubernetes probes for
// p from its Status:
//
//   - GET /healthz (liveness; /livez too) answers 200 unless the latest
//     attempt failed and no attempt has started since (Phase
//     PhaseFailed): 503. A fenced attempt is not a reason to restart the
//     process (a restart would fence the newer copy in turn), so
//     PhaseFenced stays live. A host that retries failed attempts after
//     a backoff should keep the backoff shorter than the probe's
//     failureThreshold × periodSeconds, or liveness restarts the pod
//     first.
//   - GET /readyz (readiness) answers 200 while an attempt is reading or
//     committing (PhaseRunning, PhaseStopping), while a Sync's
//     AfterSync steps run (PhaseSteps) and after a Sync succeeded
//     (PhaseSucceeded); 503 before the first attempt, while one
//     starts (claim, recovery), and after one stopped, failed or was
//     fenced.
//
// Both answer a small JSON object: status ("ok" or "unavailable"),
// pipeline, phase, generation, epoch, epoch_time and last_error
// (redacted). HEAD is answered like GET without a body; other methods
// get 405 and other paths 404. Mount it on the paths themselves
// (mux.Handle("/healthz", h); mux.Handle("/readyz", h)) or as the whole
// probe server's handler. It is safe for concurrent use.
func HealthHandler(p *Pipeline) http.Handler {
	return healthHandler{p}
}

type healthHandler struct{ p *Pipeline }

type healthBody struct {
	Status     string    `json:"status"`
	Pipeline   string    `json:"pipeline"`
	Phase      Phase     `json:"phase"`
	Generation uint64    `json:"generation"`
	Epoch      uint64    `json:"epoch"`
	EpochTime  time.Time `json:"epoch_time,omitzero"`
	LastError  string    `json:"last_error,omitempty"`
}

func (h healthHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ok bool
	st := h.p.Status()
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case "/healthz", "/livez":
		ok = st.Phase != PhaseFailed
	case "/readyz":
		ok = st.Phase == PhaseRunning || st.Phase == PhaseStopping || st.Phase == PhaseSteps ||
			st.Phase == PhaseSucceeded
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body := healthBody{Status: "ok", Pipeline: st.Pipeline, Phase: st.Phase, Generation: uint64(st.Generation),
		Epoch: st.Epoch, EpochTime: st.EpochTime, LastError: st.LastError}
	code := http.StatusOK
	if !ok {
		body.Status, code = "unavailable", http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if r.Method == http.MethodGet {
		_ = json.NewEncoder(w).Encode(body)
	}
}
