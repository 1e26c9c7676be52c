package etl

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/openetl/etl/internal/runner"
)

// etl's Event, Status, Progress, Result and their parts are the runner's,
// field for field, copied by eventOf, statusOf and progressOf: a field
// the runner gains must reach the host too. The only fields of etl's own
// are Event.Shard and Status.Shard, which the Pipeline sets (the runner
// knows nothing of shards).
func TestPublicTypesMirrorTheRunner(t *testing.T) {
	for _, pair := range [][2]any{
		{Event{}, runner.Event{}}, {Status{}, runner.Status{}}, {StreamStatus{}, runner.StreamStatus{}},
		{SplitStatus{}, runner.SplitStatus{}}, {Progress{}, runner.Progress{}}, {Result{}, runner.Result{}},
	} {
		pub, in := reflect.TypeOf(pair[0]), reflect.TypeOf(pair[1])
		var names []string
		for i := range pub.NumField() {
			if !etlOnly(pub, pub.Field(i).Name) {
				names = append(names, pub.Field(i).Name)
			}
		}
		if len(names) != in.NumField() {
			t.Errorf("etl.%s has %d fields of the runner's, the runner %d", pub.Name(), len(names), in.NumField())
			continue
		}
		for i, name := range names {
			if name != in.Field(i).Name {
				t.Errorf("etl.%s field %d is %s, the runner's %s", pub.Name(), i, name, in.Field(i).Name)
			}
		}
	}
	// Every field is copied: set each to a non-zero value and see it
	// come out of the conversion.
	var e runner.Event
	fill(reflect.ValueOf(&e).Elem())
	checkFilled(t, "eventOf", reflect.ValueOf(eventOf(e)))
	var s runner.Status
	fill(reflect.ValueOf(&s).Elem())
	checkFilled(t, "statusOf", reflect.ValueOf(statusOf(s)))
	var p runner.Progress
	fill(reflect.ValueOf(&p).Elem())
	checkFilled(t, "progressOf", reflect.ValueOf(progressOf(p)))
}

func fill(v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		if !f.CanSet() {
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(1)
		case reflect.Uint8, reflect.Uint64:
			f.SetUint(1)
		case reflect.Map:
			m := reflect.MakeMap(f.Type())
			m.SetMapIndex(reflect.New(f.Type().Key()).Elem(), reflect.New(f.Type().Elem()).Elem())
			f.Set(m)
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		case reflect.Struct:
			if f.Type().String() == "time.Time" {
				f.Set(reflect.ValueOf(testTime))
			} else {
				fill(f) // sink.Collected, say
			}
		case reflect.Interface:
			f.Set(reflect.ValueOf(errTest))
		}
	}
}

// etlOnly reports whether field name of etl's type pub is etl's own,
// set by the Pipeline rather than copied from the runner.
func etlOnly(pub reflect.Type, name string) bool {
	return name == "Shard" && (pub == reflect.TypeFor[Event]() || pub == reflect.TypeFor[Status]())
}

func checkFilled(t *testing.T, what string, v reflect.Value) {
	t.Helper()
	for i := range v.NumField() {
		if etlOnly(v.Type(), v.Type().Field(i).Name) {
			continue
		}
		if v.Field(i).IsZero() {
			t.Errorf("%s drops %s.%s", what, v.Type().Name(), v.Type().Field(i).Name)
		}
	}
}

var (
	testTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	errTest  = errors.New("test")
)
