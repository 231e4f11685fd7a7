package normalize

import (
	"slices"
	"testing"
)

// TestCatalogActions: Actions lists every action once, sorted by id
// (polc mcp lists them as tools in this order), aliases not repeated.
func TestCatalogActions(t *testing.T) {
	c := BuiltinCatalog()
	d := BuiltinDescriptors()[0]
	d.ID, d.Aliases = "aaa_first", []string{"zzz_alias"}
	d.Hints = NormalizationHints{}
	if _, err := c.Add(d); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range c.Actions() {
		ids = append(ids, a.ID())
	}
	want := []string{"aaa_first", "bash", "edit_file", "http_get", "mcp", "read_file", "write_file"}
	if !slices.Equal(ids, want) {
		t.Fatalf("Actions: %v, want %v", ids, want)
	}
}
