package checkpoint

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
)

// head is the content of a pipeline's HEAD object.
//
// Seq grows by one on every write and Nonce is fresh for every write, so
// no two versions of HEAD have the same bytes. That matters because some
// backends' version tokens are content hashes (S3 ETags, the file
// backend): identical bytes would let a stale compare-and-swap succeed
// (ABA). The nonce also lets a writer recognise its own write when a
// retried request reports a lost race for a write that in fact landed.
type head struct {
	Pipeline   string     `json:"pipeline"`
	Generation Generation `json:"generation"`
	// Ref is the current record; nil before the first commit and after a
	// rewind to before it.
	Ref   *Ref   `json:"ref"`
	Seq   uint64 `json:"seq"`
	Nonce string `json:"nonce"`
}

// next returns the HEAD that follows h with generation gen pointing at ref.
func (h *head) next(gen Generation, ref *Ref) *head {
	return &head{Pipeline: h.Pipeline, Generation: gen, Ref: ref, Seq: h.Seq + 1, Nonce: rand.Text()}
}

func (h *head) encode() []byte {
	b, err := json.Marshal(h)
	if err != nil {
		panic(err) // unreachable: every field marshals
	}
	return b
}

func decodeHead(pipeline string, data []byte) (*head, error) {
	var h head
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, fmt.Errorf("checkpoint: pipeline %q: HEAD is corrupt: %w", pipeline, err)
	}
	if h.Pipeline != pipeline || h.Generation == 0 {
		return nil, fmt.Errorf("checkpoint: pipeline %q: HEAD is corrupt: it names pipeline %q, generation %d",
			pipeline, h.Pipeline, h.Generation)
	}
	return &h, nil
}

func sameRef(a, b *Ref) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// String returns "epoch E (generation G)".
func (r Ref) String() string { return fmt.Sprintf("epoch %d (generation %d)", r.Epoch, r.Generation) }

func refString(r *Ref) string {
	if r == nil {
		return "none"
	}
	return r.String()
}
