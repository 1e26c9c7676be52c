package checkpoint

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"time"
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
	// Holder says who claimed Generation: host, process and when (see
	// holderNow). Fenced errors quote it, so an operator can find the
	// newer copy. Empty in HEADs written before it existed.
	Holder string `json:"holder,omitempty"`
}

// next returns the HEAD that follows h with generation gen pointing at ref.
// The holder stays while the generation does; a new generation's claim
// sets its own.
func (h *head) next(gen Generation, ref *Ref) *head {
	n := &head{Pipeline: h.Pipeline, Generation: gen, Ref: ref, Seq: h.Seq + 1, Nonce: rand.Text()}
	if gen == h.Generation {
		n.Holder = h.Holder
	}
	return n
}

// holderNow describes the calling process for HEAD's Holder: "host H pid
// P since T".
func holderNow() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("host %s pid %d since %s", host, os.Getpid(), time.Now().UTC().Format(time.RFC3339))
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
