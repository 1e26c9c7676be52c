package clickhouse

import (
	"strings"
	"testing"
)

// TestPatchStatement: the mutation of a Nullable column sets it where
// it is null from the staged non-null values; of an Array column, where
// it is empty from the staged non-empty ones; both under the fence and
// marked. The servers' tests run the Nullable form (conformance) and
// the Array form (TestReleaseHeldValues' items).
func TestPatchStatement(t *testing.T) {
	got := patchStatement("db", "t", "c", false, 42, "p", 7, "openetl-patch-x")
	want := "ALTER TABLE `db`.`t` UPDATE `c` = arrayElement(tupleElement(" +
		"(SELECT (groupArray(`_openetl_id`), groupArray(assumeNotNull(`c`))) FROM `db`.`_openetl_stage_t` WHERE `_openetl_batch` = 42 AND isNotNull(`c`)), 2), " +
		"transform(`_openetl_id`, tupleElement((SELECT (groupArray(`_openetl_id`), groupArray(assumeNotNull(`c`))) FROM `db`.`_openetl_stage_t` WHERE `_openetl_batch` = 42 AND isNotNull(`c`)), 1), " +
		"arrayEnumerate(tupleElement((SELECT (groupArray(`_openetl_id`), groupArray(assumeNotNull(`c`))) FROM `db`.`_openetl_stage_t` WHERE `_openetl_batch` = 42 AND isNotNull(`c`)), 1)), 0)) " +
		"WHERE isNull(`c`) AND `_openetl_id` IN (SELECT `_openetl_id` FROM `db`.`_openetl_stage_t` WHERE `_openetl_batch` = 42 AND isNotNull(`c`)) " +
		"AND (SELECT max(generation) FROM `db`.`_openetl_fence` WHERE pipeline = 'p') <= 7 AND 'openetl-patch-x' != ''"
	if got != want {
		t.Errorf("patchStatement (Nullable):\n got %s\nwant %s", got, want)
	}
	arr := patchStatement("db", "t", "c", true, 42, "p", 7, "m")
	for _, part := range []string{"WHERE empty(`c`) AND", "AND notEmpty(`c`))", "groupArray(`c`)"} {
		if !strings.Contains(arr, part) {
			t.Errorf("patchStatement (Array) lacks %q:\n%s", part, arr)
		}
	}
}

// TestPatchable: patches go to Nullable and Array columns only.
func TestPatchable(t *testing.T) {
	for typ, want := range map[string][2]bool{
		"Nullable(Float64)":                    {false, true},
		"LowCardinality(Nullable(String))":     {false, true},
		"Array(String)":                        {true, true},
		"Float64":                              {false, false},
		"LowCardinality(String)":               {false, false},
		"Nullable(Decimal(18, 2))":             {false, true},
		"Array(Nullable(Int64))":               {true, true},
		"DateTime('UTC')":                      {false, false},
		"Nullable(DateTime64(6, 'UTC'))":       {false, true},
		"Nullable(FixedString(16))":            {false, true},
		"Array(Array(LowCardinality(String)))": {true, true},
	} {
		if a, ok := patchable(typ); a != want[0] || ok != want[1] {
			t.Errorf("patchable(%s) = %v, %v; want %v, %v", typ, a, ok, want[0], want[1])
		}
	}
}

// TestClusterDeclaresNoPatches: one server applies patches, a cluster
// (whose mutations run on each replica by itself) does not.
func TestClusterDeclaresNoPatches(t *testing.T) {
	if !(&Destination{}).Capabilities().Patches {
		t.Error("one server: Capabilities().Patches is false")
	}
	if (&Destination{shards: []*Destination{{}, {}}}).Capabilities().Patches {
		t.Error("a cluster: Capabilities().Patches is true")
	}
}
