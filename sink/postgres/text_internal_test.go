package postgres

import (
	"math"
	"math/big"
	mrand "math/rand"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// appendDecimal writes the number ValueStr writes, without allocating.
func TestAppendDecimal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	big1 := mrand.New(mrand.NewSource(1))
	max := new(big.Int).Exp(big.NewInt(10), big.NewInt(38), nil)
	for k := 0; k < 20000; k++ {
		v := new(big.Int).Rand(big1, max)
		switch k % 4 {
		case 0:
			v.Neg(v)
		case 1:
			v.SetInt64(r.Int64N(1000) - 500)
		}
		n := decimal128.FromBigInt(v)
		scale := int32(r.IntN(40)) - 1
		got := string(appendDecimal(nil, n, scale))
		want := n.ToString(scale)
		if !sameNumber(got, want) {
			t.Fatalf("appendDecimal(%s, %d) = %s, want %s", v, scale, got, want)
		}
	}
	n := decimal128.FromI64(-123456)
	if a := testing.AllocsPerRun(100, func() { appendDecimal(make([]byte, 0, 64), n, 2) }); a > 1 {
		t.Errorf("appendDecimal allocates %v times", a)
	}
}

func sameNumber(a, b string) bool {
	x, ok1 := new(big.Rat).SetString(a)
	y, ok2 := new(big.Rat).SetString(b)
	return ok1 && ok2 && x.Cmp(y) == 0
}

// appendDate and appendTimestamp write the proleptic Gregorian dates
// Go's time package computes, with Postgres's BC years.
func TestAppendDate(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	check := func(days int64) {
		t.Helper()
		tm := time.Unix(days*86400, 0).UTC()
		y := tm.Year()
		want := tm.Format("-01-02")
		if y <= 0 {
			want = pad4(1-y) + want + " BC"
		} else {
			want = pad4(y) + want
		}
		b, bc := appendDate(nil, days)
		got := string(b)
		if bc {
			got += " BC"
		}
		if got != want {
			t.Fatalf("appendDate(%d) = %s, want %s", days, got, want)
		}
	}
	for _, d := range []int64{0, -1, 1, -719468, -719162, -719163, -2440588, pgEndDay + pgEpochDays - 1, 2932896, -2932897} {
		check(d)
	}
	for k := 0; k < 100000; k++ {
		check(r.Int64N(pgEndDay-pgMinDay) + pgMinDay + pgEpochDays)
	}
	for _, tc := range []struct {
		us   int64
		tz   bool
		want string
	}{
		{0, true, "1970-01-01 00:00:00+00"},
		{-1, false, "1969-12-31 23:59:59.999999"},
		{1733000000123456, true, "2024-11-30 20:53:20.123456+00"},
		{pgMinMicro + pgEpochMicros, true, "4714-11-24 00:00:00+00 BC"},
		{math.MaxInt64, false, "294247-01-10 04:00:54.775807"},
	} {
		if got := string(appendTimestamp(nil, tc.us, tc.tz)); got != tc.want {
			t.Errorf("appendTimestamp(%d, %v) = %s, want %s", tc.us, tc.tz, got, tc.want)
		}
	}
	for k := 0; k < 100000; k++ {
		us := r.Int64N(math.MaxInt64/2) - r.Int64N(-(pgMinMicro + pgEpochMicros))
		tm := time.UnixMicro(us).UTC()
		if tm.Year() <= 0 {
			continue
		}
		want := tm.Format("2006-01-02 15:04:05.999999")
		if got := string(appendTimestamp(nil, us, false)); got != want {
			t.Fatalf("appendTimestamp(%d) = %s, want %s", us, got, want)
		}
	}
	if got := string(appendTime(nil, microsPerDay)); got != "24:00:00" {
		t.Errorf("appendTime(24h) = %s", got)
	}
}

func pad4(y int) string {
	s := big.NewInt(int64(y)).String()
	return strings.Repeat("0", max(0, 4-len(s))) + s
}

// numericFits is what numeric(p,s)'s input does to a number: kept, or
// rounded (beyond_scale), or too large (out_of_range).
func TestNumericFits(t *testing.T) {
	for _, tc := range []struct {
		v    string
		p, s int
		want string
	}{
		{"123.45", 5, 2, ""},
		{"-123.45", 5, 2, ""},
		{"1234.5", 5, 2, ReasonRange},
		{"123.456", 5, 2, ReasonScale},
		{"123.4500", 5, 2, ""},
		{"0.005", 5, 2, ReasonScale},
		{"0.000", 1, 0, ""},
		{"000123", 3, 0, ""},
		{"1.2e2", 3, 0, ""},
		{"1.25e1", 3, 0, ReasonScale},
		{"1e3", 3, 0, ReasonRange},
		{"  42  ", 2, 0, ""},
		{"NaN", 5, 2, ""},
		{"Infinity", 5, 2, ReasonRange},
		{"-inf", 5, 2, ReasonRange},
		{"abc", 5, 2, ""},
		{".5", 1, 1, ""},
		{"5.", 1, 0, ""},
		{"99999999999999999999.99", 22, 2, ""},
		{"1e-3", 3, 3, ""},
		{"1e-4", 3, 3, ReasonScale},
	} {
		if got := numericFits(tc.v, tc.p, tc.s); got != tc.want {
			t.Errorf("numericFits(%q, %d, %d) = %q, want %q", tc.v, tc.p, tc.s, got, tc.want)
		}
	}
}

// FuzzNumericFits checks numericFits against big.Rat on every number it
// parses: beyond_scale when v*10^s is not an integer, else out_of_range
// when |v| >= 10^(p-s).
func FuzzNumericFits(f *testing.F) {
	for _, s := range []string{"1.5", "-0.001", "12345.678e-2", "9e9", "0", "1e-6"} {
		f.Add(s, uint8(10), uint8(2))
	}
	f.Fuzz(func(t *testing.T, v string, p, s uint8) {
		prec, scale := int(p%40)+1, int(s%40)
		if scale > prec {
			scale = prec
		}
		got := numericFits(v, prec, scale)
		if strings.Trim(v, "0123456789+-.eE") != "" || v == "" {
			return // big.Rat reads what numeric_in does not (hex, fractions)
		}
		if e := strings.IndexAny(v, "eE"); e >= 0 && len(v)-e-1 > 4 {
			return
		}
		r, ok := new(big.Rat).SetString(v)
		if !ok {
			return
		}
		ten := func(k int) *big.Rat {
			return new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(k)), nil))
		}
		want := ""
		if !new(big.Rat).Mul(r, ten(scale)).IsInt() {
			want = ReasonScale
		} else if new(big.Rat).Abs(r).Cmp(ten(prec-scale)) >= 0 {
			want = ReasonRange
		}
		if got != want {
			t.Errorf("numericFits(%q, %d, %d) = %q, want %q", v, prec, scale, got, want)
		}
	})
}
