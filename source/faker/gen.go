package faker

import (
	"strconv"
	"time"

	"github.com/openetl/etl/source"
)

// The streams a Source can generate.
const (
	// Customers is a CDC stream of customer rows: mostly inserts of new
	// customers, with updates (about 1 record in 8) and deletes (about 1 in
	// 40) of earlier ones.
	Customers = "customers"
	// Orders is a stream of order rows: inserts, with status updates of
	// earlier orders (about 1 record in 5).
	Orders = "orders"
)

// kind is a stream as an index into per-stream tables.
type kind uint8

const (
	kindCustomers kind = iota
	kindOrders
	numKinds
)

var kindNames = [numKinds]string{Customers, Orders}

func kindOf(name string) (kind, bool) {
	switch name {
	case Customers:
		return kindCustomers, true
	case Orders:
		return kindOrders, true
	}
	return 0, false
}

// Purposes: each independent decision about a record draws from its own
// hash, so changing one (say, the malformed share) never moves another.
const (
	pOp uint64 = iota + 1
	pTarget
	pMortal
	pRow
	pChange
	pMalformed
	pMalformedKind
	pCustomerRef
)

// mix is the splitmix64 finaliser.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// rng is a splitmix64 sequence: the fields of one row are drawn from it.
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	return mix(uint64(*r))
}

func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

// gen computes records. It is immutable after newGen, so it is safe for
// concurrent use.
type gen struct {
	share float64 // malformed share in [0,1]
	base  [numKinds]uint64
}

func newGen(seed uint64, share float64) gen {
	g := gen{share: share}
	g.base[kindCustomers] = mix(mix(seed) ^ 0x637573746f6d6572) // "customer"
	g.base[kindOrders] = mix(mix(seed) ^ 0x6f72646572730000)    // "orders"
	return g
}

// h is the hash of (seed, stream, index, purpose).
func (g *gen) h(k kind, i int64, p uint64) uint64 {
	return mix(g.base[k] ^ mix(uint64(i)*0x9e3779b97f4a7c15+p*0xd1b54a32d192ed03))
}

// op is the operation of record i of stream k.
func (g *gen) op(k kind, i int64) source.Op {
	switch k {
	case kindCustomers:
		// Records 0 and 1 are inserts so that updates (which target
		// customers that are never deleted, like record 0) and deletes
		// (which target "mortal" ones, like record 1) always find one.
		if i < 2 {
			return source.OpInsert
		}
		switch r := g.h(k, i, pOp) % 1000; {
		case r < 125:
			return source.OpUpdate
		case r < 150:
			return source.OpDelete
		}
	case kindOrders:
		if i >= 1 && g.h(k, i, pOp)%1000 < 200 {
			return source.OpUpdate
		}
	}
	return source.OpInsert
}

// mortal reports whether the customer inserted by record i may be deleted.
// Customers are split in two so that no update ever touches a customer
// that a delete may have removed: with merge semantics that would bring
// the row back.
func (g *gen) mortal(i int64) bool {
	if i < 2 {
		return i == 1
	}
	return g.h(kindCustomers, i, pMortal)%4 == 0
}

// target is the index of the insert that the update or delete at i (i>=1)
// changes.
func (g *gen) target(k kind, i int64, op source.Op) int64 {
	h := g.h(k, i, pTarget)
	switch {
	case k == kindCustomers && op == source.OpDelete:
		t := 1 + int64(h%uint64(i-1))
		for g.op(k, t) != source.OpInsert || !g.mortal(t) {
			t--
		}
		return t
	case k == kindCustomers:
		t := int64(h % uint64(i))
		for g.op(k, t) != source.OpInsert || g.mortal(t) {
			t--
		}
		return t
	default:
		t := int64(h % uint64(i))
		for g.op(k, t) != source.OpInsert {
			t--
		}
		return t
	}
}

// Kinds of malformed payload.
const (
	malTruncated = iota
	malArray
	malGarbage
)

// malformed reports whether record i's payload is malformed, and how.
func (g *gen) malformed(k kind, i int64) (bool, int) {
	if g.share <= 0 {
		return false, 0
	}
	u := float64(g.h(k, i, pMalformed)>>11) / (1 << 53) // uniform in [0,1)
	if u >= g.share {
		return false, 0
	}
	return true, int(g.h(k, i, pMalformedKind) % 3)
}

// generate appends record i of stream k's key and payload to buf.
func (g *gen) generate(k kind, i int64, buf []byte) (op source.Op, seq int64, key, payload []byte) {
	op = g.op(k, i)
	row, change := i, int64(-1)
	if op != source.OpInsert {
		row = g.target(k, i, op)
		if op == source.OpUpdate {
			change = i
		}
	}
	start := len(buf)
	buf = strconv.AppendInt(buf, row+1, 10)
	mid := len(buf)

	bad, how := g.malformed(k, i)
	if bad && how == malGarbage {
		r := rng(g.h(k, i, pRow))
		n := 8 + r.intn(33)
		// 0xff never starts valid JSON (nor valid UTF-8).
		buf = append(buf, 0xff)
		for j := 1; j < n; j++ {
			buf = append(buf, byte(r.next()))
		}
		return op, i + 1, buf[start:mid], buf[mid:]
	}
	if bad && how == malArray {
		buf = append(buf, '[')
	}
	switch {
	case op == source.OpDelete:
		buf = append(buf, `{"id":`...)
		buf = strconv.AppendInt(buf, row+1, 10)
		buf = append(buf, '}')
	case k == kindCustomers:
		buf = g.appendCustomer(buf, row, change)
	default:
		buf = g.appendOrder(buf, row, change)
	}
	if bad {
		switch how {
		case malArray:
			buf = append(buf, ']')
		case malTruncated:
			// Any proper, non-empty prefix of a JSON object is invalid:
			// the closing brace is missing.
			n := len(buf) - mid
			buf = buf[:mid+1+int(g.h(k, i, pMalformedKind)>>8%uint64(n-1))]
		}
	}
	return op, i + 1, buf[start:mid], buf[mid:]
}

var (
	firstNames = [...]string{"ada", "alan", "barbara", "claude", "donald", "edsger", "frances", "grace",
		"hedy", "ivan", "john", "ken", "leslie", "margaret", "niklaus", "radia", "tony", "yukihiro"}
	lastNames = [...]string{"hopper", "turing", "liskov", "shannon", "knuth", "dijkstra", "allen", "lamarr",
		"sutherland", "backus", "thompson", "lamport", "hamilton", "wirth", "perlman", "hoare", "matsumoto"}
	countries = [...]string{"DE", "FR", "GB", "US", "JP", "BR", "IN", "NL", "SE", "ES", "IT", "CA"}
	tagNames  = [8]string{"newsletter", "beta", "partner", "churn-risk", "wholesale", "referral", "staff", "trial"}

	currencies    = [...]string{"EUR", "USD", "GBP", "JPY", "CHF"}
	orderStatuses = [...]string{"paid", "shipped", "delivered", "cancelled", "refunded"}
)

var (
	signupBase = time.Date(2019, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	ordersBase = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
)

const signupSpan = 5 * 365 * 86400 // seconds

// appendCustomer appends the row inserted by customers record j, changed by
// the update at record change (or unchanged when change < 0).
func (g *gen) appendCustomer(b []byte, j, change int64) []byte {
	r := rng(g.h(kindCustomers, j, pRow))
	first := firstNames[r.intn(len(firstNames))]
	last := lastNames[r.intn(len(lastNames))]
	country := countries[r.intn(len(countries))]
	score := int64(r.intn(100000)) // hundredths
	vip := r.intn(10) == 0
	signup := signupBase + int64(r.intn(signupSpan))
	tags := r.next()
	if change >= 0 {
		u := rng(g.h(kindCustomers, change, pChange))
		score = int64(u.intn(100000))
		vip = u.intn(5) == 0
		tags = u.next()
	}

	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, j+1, 10)
	b = append(b, `,"name":"`...)
	b = append(b, first[0]-'a'+'A')
	b = append(b, first[1:]...)
	b = append(b, ' ', last[0]-'a'+'A')
	b = append(b, last[1:]...)
	b = append(b, `","email":"`...)
	b = append(b, first...)
	b = append(b, '.')
	b = append(b, last...)
	b = append(b, '.')
	b = strconv.AppendInt(b, j+1, 10)
	b = append(b, `@example.com","country":"`...)
	b = append(b, country...)
	b = append(b, `","score":`...)
	b = appendHundredths(b, score)
	b = append(b, `,"vip":`...)
	b = strconv.AppendBool(b, vip)
	b = append(b, `,"signup":"`...)
	b = time.Unix(signup, 0).UTC().AppendFormat(b, time.RFC3339)
	b = append(b, `","tags":[`...)
	// Each tag is in with probability 1/4: two random bytes ANDed.
	mask := byte(tags) & byte(tags>>8)
	sep := false
	for t := range tagNames {
		if mask&(1<<t) == 0 {
			continue
		}
		if sep {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, tagNames[t]...)
		b = append(b, '"')
		sep = true
	}
	return append(b, "]}"...)
}

// customerRef is the id of the customer who placed order j: a customer
// inserted at or before customers record j.
func (g *gen) customerRef(j int64) int64 {
	c := int64(g.h(kindOrders, j, pCustomerRef) % uint64(j+1))
	for g.op(kindCustomers, c) != source.OpInsert {
		c--
	}
	return c + 1
}

// appendOrder appends the row inserted by orders record j, with the status
// set by the update at record change (or "pending" when change < 0).
func (g *gen) appendOrder(b []byte, j, change int64) []byte {
	r := rng(g.h(kindOrders, j, pRow))
	currency := currencies[r.intn(len(currencies))]
	placed := ordersBase + j*37 + int64(r.intn(37))
	nitems := 1 + r.intn(4)
	status := "pending"
	if change >= 0 {
		u := rng(g.h(kindOrders, change, pChange))
		status = orderStatuses[u.intn(len(orderStatuses))]
	}
	// The amount comes before the items in the row, so draw the items
	// twice from copies of the same sequence: once to sum, once to write.
	items := r
	var amount int64
	for range nitems {
		r.next() // sku
		qty := int64(1 + r.intn(5))
		price := int64(99 + r.intn(20000))
		amount += qty * price
	}

	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, j+1, 10)
	b = append(b, `,"customer_id":`...)
	b = strconv.AppendInt(b, g.customerRef(j), 10)
	b = append(b, `,"amount":`...)
	b = appendHundredths(b, amount)
	b = append(b, `,"currency":"`...)
	b = append(b, currency...)
	b = append(b, `","status":"`...)
	b = append(b, status...)
	b = append(b, `","items":[`...)
	for n := range nitems {
		if n > 0 {
			b = append(b, ',')
		}
		sku := 1 + items.intn(5000)
		qty := 1 + items.intn(5)
		price := int64(99 + items.intn(20000))
		b = append(b, `{"sku":"SKU-`...)
		b = appendPadded(b, sku, 5)
		b = append(b, `","qty":`...)
		b = strconv.AppendInt(b, int64(qty), 10)
		b = append(b, `,"price":`...)
		b = appendHundredths(b, price)
		b = append(b, '}')
	}
	b = append(b, `],"placed_at":"`...)
	b = time.Unix(placed, 0).UTC().AppendFormat(b, time.RFC3339)
	return append(b, `"}`...)
}

// appendHundredths appends v/100 with exactly two decimals (v >= 0).
func appendHundredths(b []byte, v int64) []byte {
	b = strconv.AppendInt(b, v/100, 10)
	c := v % 100
	return append(b, '.', byte('0'+c/10), byte('0'+c%10))
}

// appendPadded appends v (>= 0) in decimal, zero-padded to width digits.
func appendPadded(b []byte, v, width int) []byte {
	var d [20]byte
	n := len(strconv.AppendInt(d[:0], int64(v), 10))
	for ; n < width; n++ {
		b = append(b, '0')
	}
	return strconv.AppendInt(b, int64(v), 10)
}
