package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/openetl/etl/checkpoint/object"
)

// DefaultTTL is LeaseConfig.TTL's default.
const DefaultTTL = 15 * time.Second

// LeaseConfig configures Leases. Bucket, Prefix, Host and Shards are
// required.
type LeaseConfig struct {
	// Bucket holds the leases: the kind of bucket a checkpoint store
	// keeps its logs in (object.NewDir, object.NewMem, or an S3, GCS or
	// Azure bucket through cloud.NewBucket), shared by every host. Only
	// its Create, Read, Replace, Put and List are used; the caller owns
	// it.
	Bucket object.Bucket
	// Prefix is the key prefix the leases live under ("orders/_leases"):
	// one object per shard, "{Prefix}/shard-{i}", and one per host,
	// "{Prefix}/hosts/{Host}". Every host of one sharded pipeline uses
	// the same Prefix and Shards.
	Prefix string
	// Host names this host among the others; unique per process (a pod
	// name, or hostname and PID). It must be a valid key segment: ASCII
	// letters, digits, '-', '_' and '.', not starting with '.'.
	Host string
	// Shards is the shard count S; the shards are 0 to S-1.
	Shards int
	// TTL is how long a lease or host object must stay unchanged, as
	// this host observes it, before this host takes it to be dead. A
	// live holder renews its leases every Interval; one that could not
	// renew a lease for TTL by its own clock stops that shard. Default
	// DefaultTTL (15s).
	TTL time.Duration
	// Interval is how often leases and the host object are renewed and
	// the others' read. Default TTL/3; at most TTL/2.
	Interval time.Duration
	// Permanent, when set and true for the error a shard's run returns,
	// ends Run: it stops every run, frees its leases and returns that
	// error, so the host sees a failure that retrying can't mend (a bad
	// configuration, a lost position) instead of the shard restarting
	// every Interval; the other hosts then take the shards and meet it
	// too. Pass etl.IsPermanent. Default nil: every error is logged and
	// the run started again at the next Interval.
	Permanent func(error) bool
	// Logger receives acquisitions, losses and releases at Info, bucket
	// errors at Warn. Default: discard.
	Logger *slog.Logger
}

// Leases spreads the shards of one pipeline among the hosts that run a
// Leases with the same Bucket, Prefix and Shards, with a lease per
// shard kept by conditional writes (object.Bucket's Create and
// Replace: If-None-Match and If-Match on S3 and Azure, generation
// match on GCS).
//
// Every Interval each host renews its host object and the leases it
// holds, and reads the others'. The hosts it has seen change within
// TTL (itself included), sorted by name, are the live ones; with S
// shards over N live hosts the first S mod N hosts hold ⌈S/N⌉ shards
// and the rest ⌊S/N⌋. A host holding more stops the extra shards' runs
// and, once each has returned, frees their leases; a host holding
// fewer takes leases that are free or expired: unchanged for TTL as
// this host saw them (expiry is judged by local observation of the
// lease's version token, never by comparing clocks across hosts).
//
// The bound: a host that dies after renewing at time t has its shards
// taken over by the time t + TTL + 2×Interval (plus the bucket's
// latency), when the next owner's run starts; with the defaults, 25s.
//
// A host that loses a lease (its Replace finds another version) or
// can't renew it for TTL cancels that shard's run. The lease only
// decides who should run a shard: a host paused past its lease (a
// zombie) may run on until it notices, and is fenced by the next
// owner's generation claim at the checkpoint log and the destination
// (etl.IsFenced), never by the lease. Leases is safe for concurrent
// use.
type Leases struct {
	cfg   LeaseConfig
	log   *slog.Logger
	now   func() time.Time
	seq   uint64
	nonce string

	failed chan error // a run's error that Permanent calls permanent

	mu     sync.Mutex
	seen   map[string]observed // key → the last version seen, and when it first was
	held   map[int]*lease      // shards this host holds (running, or stopping to be released)
	hostOK bool                // the host object was written at least once
}

// observed is the version of an object this host last read and when it
// first saw that version.
type observed struct {
	tok   object.Token
	since time.Time
	doc   leaseDoc
}

// lease is a shard this host holds.
type lease struct {
	tok     object.Token  // the version this host wrote last
	renewed time.Time     // when it last renewed it
	cancel  func()        // stops the shard's run
	done    chan struct{} // closed when the run has returned
	release bool          // the run is stopping to give the shard up
	lost    bool          // the lease is lost; the run is stopping
}

// leaseDoc is the content of a lease or host object. Seq and Nonce make
// every write's bytes unique (some backends' tokens hash the content).
type leaseDoc struct {
	Shard  int    `json:"shard,omitempty"`
	Holder string `json:"holder,omitempty"` // "" for a free lease
	Host   string `json:"host,omitempty"`
	Gone   bool   `json:"gone,omitempty"` // a host that stopped
	Seq    uint64 `json:"seq"`
	Nonce  string `json:"nonce"`
	Time   string `json:"time"` // for people; never compared
}

// NewLeases checks cfg and returns Leases; every error wraps ErrConfig.
// Nothing is written until Run.
func NewLeases(cfg LeaseConfig) (*Leases, error) {
	switch {
	case cfg.Bucket == nil:
		return nil, fmt.Errorf("%w: Bucket is nil", ErrConfig)
	case cfg.Shards < 1:
		return nil, fmt.Errorf("%w: Shards is %d, want at least 1", ErrConfig, cfg.Shards)
	case cfg.Host == "" || strings.Contains(cfg.Host, "/") || object.ValidKey(cfg.Host) != nil:
		return nil, fmt.Errorf("%w: Host %q: want a key segment (letters, digits, '-', '_', '.', not starting with '.')", ErrConfig, cfg.Host)
	case object.ValidKey(strings.TrimSuffix(cfg.Prefix, "/")) != nil:
		return nil, fmt.Errorf("%w: Prefix %q: want a slash-separated key (\"orders/_leases\")", ErrConfig, cfg.Prefix)
	}
	cfg.Prefix = strings.TrimSuffix(cfg.Prefix, "/")
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Interval == 0 {
		cfg.Interval = cfg.TTL / 3
	}
	if cfg.TTL < 0 || cfg.Interval <= 0 || cfg.Interval > cfg.TTL/2 {
		return nil, fmt.Errorf("%w: TTL %v and Interval %v: want Interval positive and at most TTL/2", ErrConfig, cfg.TTL, cfg.Interval)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Leases{cfg: cfg, log: cfg.Logger.With("host", cfg.Host), now: time.Now, nonce: hex.EncodeToString(b[:]),
		failed: make(chan error, 1), seen: map[string]observed{}, held: map[int]*lease{}}, nil
}

// Bound returns the longest a dead host's shards wait for another host:
// TTL + 2×Interval, plus the bucket's latency and the new run's start.
func (l *Leases) Bound() time.Duration { return l.cfg.TTL + 2*l.cfg.Interval }

// Held returns the shards this host holds now, in order.
func (l *Leases) Held() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]int, 0, len(l.held))
	for s, ls := range l.held {
		if !ls.release && !ls.lost {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// Run takes part in the spreading of shards until ctx is cancelled,
// calling run(ctx, shard) on a goroutine of its own for each shard it
// acquires (typically the Run of that shard's etl.Pipeline). run's ctx
// is cancelled when the lease is lost, given up for balance, or Run's
// ctx ends; run must then return promptly. A run that returns while
// the lease is held (an error, or a Sync that finished) is started
// again at the next Interval; errors are logged at Warn, except one
// that LeaseConfig.Permanent calls permanent, which ends Run as below
// and is returned.
//
// When ctx ends, Run cancels every run, waits for them to return, frees
// its leases and marks its host object gone, so the other hosts take
// the shards at once instead of after TTL, and returns nil. Errors of
// the bucket are logged and retried at the next Interval; a lease that
// can't be renewed for TTL is given up.
func (l *Leases) Run(ctx context.Context, run func(ctx context.Context, shard int) error) error {
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		l.step(ctx, run)
		select {
		case <-ctx.Done():
			l.stop(context.WithoutCancel(ctx))
			return nil
		case err := <-l.failed:
			l.stop(context.WithoutCancel(ctx))
			return err
		case <-t.C:
		}
	}
}

// step is one Interval's work: heartbeat, read, renew, release, acquire.
func (l *Leases) step(ctx context.Context, run func(context.Context, int) error) {
	now := l.now()
	l.heartbeat(ctx, now)
	live := l.liveHosts(ctx, now)
	docs := l.readLeases(ctx, now)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renew(ctx, now, docs)
	target := l.target(live)
	holding := 0
	for s, ls := range l.held {
		switch {
		case ls.lost && closed(ls.done):
			delete(l.held, s) // may be taken again from now on
		case !ls.release && !ls.lost:
			holding++
		}
	}
	// Give up the highest shards over the target; free those whose runs
	// have returned.
	for s := l.cfg.Shards - 1; s >= 0 && holding > target; s-- {
		if ls, ok := l.held[s]; ok && !ls.release && !ls.lost {
			ls.release = true
			ls.cancel()
			holding--
			l.log.Info("shard: giving up shard for balance", "shard", s, "target", target, "live_hosts", len(live))
		}
	}
	for s, ls := range l.held {
		if ls.release && !ls.lost && closed(ls.done) {
			if err := l.write(ctx, s, leaseDoc{Shard: s}, ls.tok); err != nil {
				l.log.Warn("shard: free lease", "shard", s, "err", err)
			}
			delete(l.held, s)
		}
	}
	// Take free, expired or own leases up to the target.
	for s := 0; s < l.cfg.Shards && holding < target; s++ {
		if _, ok := l.held[s]; ok {
			continue
		}
		key := l.leaseKey(s)
		o, exists := l.seen[key]
		var tok object.Token
		switch {
		case !exists:
			if err := l.cfg.Bucket.Create(ctx, key, l.doc(s, now)); err != nil {
				if !errors.Is(err, object.ErrExists) {
					l.log.Warn("shard: create lease", "shard", s, "err", err)
				}
				continue
			}
			tok, _ = l.mine(ctx, key, l.seq)
		case o.doc.Holder == "" || o.doc.Holder == l.cfg.Host || now.Sub(o.since) >= l.cfg.TTL:
			if err := l.cfg.Bucket.Replace(ctx, key, l.doc(s, now), o.tok); err != nil {
				if !errors.Is(err, object.ErrPrecondition) {
					l.log.Warn("shard: take lease", "shard", s, "err", err)
				}
				continue
			}
			tok, _ = l.mine(ctx, key, l.seq)
		default:
			continue
		}
		if tok == "" {
			continue // read back failed; renewal will find out
		}
		l.start(ctx, s, tok, now, run, o)
		holding++
	}
	// Restart the runs that returned on their own while the lease holds,
	// unless one failed for good: Run is about to end.
	if len(l.failed) > 0 {
		return
	}
	for s, ls := range l.held {
		if !ls.release && !ls.lost && closed(ls.done) {
			l.start(ctx, s, ls.tok, ls.renewed, run, observed{})
		}
	}
}

// start runs shard s under a fresh lease entry.
func (l *Leases) start(ctx context.Context, s int, tok object.Token, renewed time.Time, run func(context.Context, int) error, prev observed) {
	rctx, cancel := context.WithCancel(ctx)
	ls := &lease{tok: tok, renewed: renewed, cancel: cancel, done: make(chan struct{})}
	l.held[s] = ls
	l.seen[l.leaseKey(s)] = observed{tok: tok, since: renewed, doc: leaseDoc{Shard: s, Holder: l.cfg.Host}}
	if prev.doc.Holder != "" && prev.doc.Holder != l.cfg.Host {
		l.log.Info("shard: took over expired lease", "shard", s, "from", prev.doc.Holder)
	} else {
		l.log.Info("shard: acquired lease", "shard", s)
	}
	go func() {
		defer close(ls.done)
		err := run(rctx, s)
		switch {
		case err == nil || rctx.Err() != nil:
		case l.cfg.Permanent != nil && l.cfg.Permanent(err):
			l.log.Error("shard: run failed for good: leaving", "shard", s, "err", err)
			select {
			case l.failed <- fmt.Errorf("shard: shard %d: %w", s, err):
			default: // another run's error ends Run already
			}
		default:
			l.log.Warn("shard: run returned", "shard", s, "err", err)
		}
	}()
}

// renew writes a new version of every held lease; a lease found taken
// or not renewed for TTL is lost and its run cancelled.
func (l *Leases) renew(ctx context.Context, now time.Time, docs map[int]observed) {
	for s, ls := range l.held {
		if ls.lost {
			continue
		}
		err := l.write(ctx, s, leaseDoc{Shard: s, Holder: l.cfg.Host}, ls.tok)
		if err == nil {
			ls.renewed = now
			continue
		}
		lost := errors.Is(err, object.ErrPrecondition) || errors.Is(err, errTaken)
		if !lost && now.Sub(ls.renewed) < l.cfg.TTL {
			l.log.Warn("shard: renew lease", "shard", s, "err", err)
			continue
		}
		// The shard is taken again here only once its run has returned.
		ls.cancel()
		ls.lost = true
		l.log.Info("shard: lost lease", "shard", s, "holder", docs[s].doc.Holder, "err", err)
	}
}

// write replaces shard s's lease, held at tok, with d and records the
// new token.
func (l *Leases) write(ctx context.Context, s int, d leaseDoc, tok object.Token) error {
	l.seq++
	d.Seq, d.Nonce, d.Time = l.seq, l.nonce, l.now().UTC().Format(time.RFC3339Nano)
	b, _ := json.Marshal(d)
	key := l.leaseKey(s)
	if err := l.cfg.Bucket.Replace(ctx, key, b, tok); err != nil {
		return err
	}
	nt, err := l.mine(ctx, key, d.Seq)
	if err != nil {
		return err
	}
	if ls, ok := l.held[s]; ok {
		ls.tok = nt
	}
	l.seen[key] = observed{tok: nt, since: l.now(), doc: d}
	return nil
}

// errTaken says a lease read back right after this host wrote it is
// another host's version already.
var errTaken = errors.New("shard: lease taken right after it was written")

// mine reads key back and returns its token if it is still the version
// of sequence seq this host wrote.
func (l *Leases) mine(ctx context.Context, key string, seq uint64) (object.Token, error) {
	d, tok, err := l.readToken(ctx, key)
	if err != nil {
		return "", err
	}
	if d.Seq != seq || d.Nonce != l.nonce {
		return "", errTaken
	}
	return tok, nil
}

// doc returns the bytes of a lease of shard s held by this host.
func (l *Leases) doc(s int, now time.Time) []byte {
	l.seq++
	b, _ := json.Marshal(leaseDoc{Shard: s, Holder: l.cfg.Host, Seq: l.seq, Nonce: l.nonce, Time: now.UTC().Format(time.RFC3339Nano)})
	return b
}

// readToken reads key and decodes it.
func (l *Leases) readToken(ctx context.Context, key string) (leaseDoc, object.Token, error) {
	b, tok, err := l.cfg.Bucket.Read(ctx, key)
	if err != nil {
		return leaseDoc{}, "", err
	}
	var d leaseDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return leaseDoc{}, "", fmt.Errorf("shard: lease %s: %w", key, err)
	}
	return d, tok, nil
}

// readLeases reads every shard's lease and notes new versions.
func (l *Leases) readLeases(ctx context.Context, now time.Time) map[int]observed {
	out := map[int]observed{}
	for s := range l.cfg.Shards {
		key := l.leaseKey(s)
		d, tok, err := l.readToken(ctx, key)
		l.mu.Lock()
		switch {
		case errors.Is(err, object.ErrNotExist):
			delete(l.seen, key)
		case err != nil:
			l.log.Warn("shard: read lease", "shard", s, "err", err)
		default:
			out[s] = l.observe(key, tok, d, now)
		}
		l.mu.Unlock()
	}
	return out
}

// observe records the version tok of key as seen at now.
func (l *Leases) observe(key string, tok object.Token, d leaseDoc, now time.Time) observed {
	o, ok := l.seen[key]
	if !ok || o.tok != tok {
		o = observed{tok: tok, since: now}
	}
	o.doc = d
	l.seen[key] = o
	return o
}

// heartbeat writes this host's object.
func (l *Leases) heartbeat(ctx context.Context, now time.Time) {
	l.mu.Lock()
	l.seq++
	b, _ := json.Marshal(leaseDoc{Host: l.cfg.Host, Seq: l.seq, Nonce: l.nonce, Time: now.UTC().Format(time.RFC3339Nano)})
	l.mu.Unlock()
	if err := l.cfg.Bucket.Put(ctx, l.hostKey(l.cfg.Host), b); err != nil {
		l.log.Warn("shard: write host object", "err", err)
		return
	}
	l.mu.Lock()
	l.hostOK = true
	l.mu.Unlock()
}

// liveHosts returns the hosts seen alive within TTL, this one included,
// sorted.
func (l *Leases) liveHosts(ctx context.Context, now time.Time) []string {
	live := []string{l.cfg.Host}
	keys, err := l.cfg.Bucket.List(ctx, l.cfg.Prefix+"/hosts/")
	if err != nil {
		l.log.Warn("shard: list hosts", "err", err)
	}
	for _, key := range keys {
		host := strings.TrimPrefix(key, l.cfg.Prefix+"/hosts/")
		if host == l.cfg.Host {
			continue
		}
		d, tok, err := l.readToken(ctx, key)
		if err != nil {
			continue
		}
		l.mu.Lock()
		o := l.observe(key, tok, d, now)
		l.mu.Unlock()
		if !d.Gone && now.Sub(o.since) < l.cfg.TTL {
			live = append(live, host)
		}
	}
	slices.Sort(live)
	return live
}

// target returns how many shards this host should hold among live.
func (l *Leases) target(live []string) int {
	n := len(live)
	rank := slices.Index(live, l.cfg.Host)
	t := l.cfg.Shards / n
	if rank < l.cfg.Shards%n {
		t++
	}
	return t
}

// stop cancels every run, waits for them, frees the leases and marks
// the host gone.
func (l *Leases) stop(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ls := range l.held {
		ls.cancel()
	}
	for s, ls := range l.held {
		<-ls.done
		if ls.lost {
			delete(l.held, s)
			continue
		}
		if err := l.write(ctx, s, leaseDoc{Shard: s}, ls.tok); err != nil {
			l.log.Warn("shard: free lease", "shard", s, "err", err)
		}
		delete(l.held, s)
	}
	l.seq++
	b, _ := json.Marshal(leaseDoc{Host: l.cfg.Host, Gone: true, Seq: l.seq, Nonce: l.nonce, Time: l.now().UTC().Format(time.RFC3339Nano)})
	if err := l.cfg.Bucket.Put(ctx, l.hostKey(l.cfg.Host), b); err != nil {
		l.log.Warn("shard: mark host gone", "err", err)
	}
}

func (l *Leases) leaseKey(s int) string   { return fmt.Sprintf("%s/shard-%d", l.cfg.Prefix, s) }
func (l *Leases) hostKey(h string) string { return l.cfg.Prefix + "/hosts/" + h }

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
