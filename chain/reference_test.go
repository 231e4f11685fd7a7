package chain_test

// A naive reference verifier, written straight from docs/evidence.md with
// encoding/json and the jcs package and no shared code with the streaming
// verifier (except the jcs canonicalizer). It only says whether a chain is
// valid; the fast verifier must agree on every input.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"polc.dev/polc/internal/jcs"
)

var (
	refUUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	refHex  = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

var refRecordKeys = []string{"chain_hash", "chain_id", "created_at", "hash_algorithm", "operation_id",
	"payload_digest", "payload_json", "policy_id", "policy_version", "previous_chain_hash", "record_id",
	"record_type", "sequence", "supersedes_record_id"}

// refPayloads: record type → member → grammar.
var refPayloads = map[string]map[string]string{
	"policy_bound":              {"policy_digest": "hex", "effect_backend_id": "str", "effect_capability_digest": "hex", "task_boundary_id": "uuid"},
	"operation_started":         {"tool_id": "str", "attempt_id": "uuid", "request_digest": "hex", "actor": "actor?", "run_id": "str?", "parent_operation_id": "uuid?"},
	"gate_evaluated":            {"result_id": "uuid", "gate_id": "str", "level": "level", "decision": "decision", "reason_code": "str", "rule_ids": "strs", "arguments_digest": "hex"},
	"exception_granted":         {"grant_id": "uuid", "gate_id": "str", "actor": "actor", "reason_code": "str", "issued_at": "time", "expires_at": "time"},
	"operation_denied":          {"gate_id": "str?", "reason_code": "str", "disposition": "disposition", "approver_class": "str?"},
	"callable_completed":        {"result_digest": "hex", "duration_us": "int"},
	"callable_failed":           {"error_class": "str", "duration_us": "int"},
	"operation_cancelled":       {"duration_us": "int"},
	"operation_timed_out":       {"duration_us": "int"},
	"external_result_ambiguous": {"reason_code": "str", "duration_us": "int"},
	"task_closed":               {"task_boundary_id": "uuid", "opened_at": "time", "closed_at": "time", "operation_count": "int"},
	"record_superseded":         {"reason_code": "str"},
}

var refTerminals = []string{"operation_denied", "callable_completed", "callable_failed", "operation_cancelled", "operation_timed_out", "external_result_ambiguous"}

func refTime(s string) bool {
	t, err := time.Parse("2006-01-02T15:04:05.000000Z", s)
	return err == nil && t.Format("2006-01-02T15:04:05.000000Z") == s
}

func refInt(raw json.RawMessage) (int64, bool) {
	s := string(raw)
	if s == "" || strings.ContainsAny(s, ".eE+-") || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n <= 1<<53-1
}

func refValue(kind string, raw json.RawMessage) bool {
	if strings.HasSuffix(kind, "?") {
		if string(raw) == "null" {
			return true
		}
		kind = strings.TrimSuffix(kind, "?")
	}
	var s string
	isStr := json.Unmarshal(raw, &s) == nil && raw[0] == '"'
	switch kind {
	case "str":
		return isStr && s != ""
	case "hex":
		return isStr && refHex.MatchString(s)
	case "uuid":
		return isStr && refUUID.MatchString(s)
	case "time":
		return isStr && refTime(s)
	case "actor":
		k, id, ok := strings.Cut(s, ":")
		return isStr && ok && k != "" && id != ""
	case "level":
		return isStr && (s == "hard" || s == "soft" || s == "advisory")
	case "decision":
		return isStr && (s == "allow" || s == "deny")
	case "disposition":
		return isStr && (s == "deny" || s == "escalate")
	case "int":
		_, ok := refInt(raw)
		return ok
	case "strs":
		var list []json.RawMessage
		if raw[0] != '[' || json.Unmarshal(raw, &list) != nil {
			return false
		}
		for _, e := range list {
			if !refValue("str", e) {
				return false
			}
		}
		return true
	}
	return false
}

type refRec struct {
	m       map[string]json.RawMessage
	payload map[string]json.RawMessage
	str     map[string]string
}

func (r refRec) s(k string) string { return r.str[k] }

// refParse checks one line on its own; it returns an error for any defect.
func refParse(line []byte) (refRec, error) {
	r := refRec{str: map[string]string{}}
	canon, err := jcs.Transform(line)
	if err != nil || !bytes.Equal(canon, line) {
		return r, fmt.Errorf("not canonical")
	}
	if json.Unmarshal(line, &r.m) != nil || line[0] != '{' {
		return r, fmt.Errorf("not an object")
	}
	if len(r.m) != len(refRecordKeys) {
		return r, fmt.Errorf("members")
	}
	for _, k := range refRecordKeys {
		raw, ok := r.m[k]
		if !ok {
			return r, fmt.Errorf("missing %s", k)
		}
		var s string
		if json.Unmarshal(raw, &s) == nil && raw[0] == '"' {
			r.str[k] = s
		}
	}
	kinds := map[string]string{"chain_hash": "hex", "chain_id": "uuid", "created_at": "time", "operation_id": "uuid?",
		"payload_digest": "hex", "policy_id": "uuid", "policy_version": "str", "previous_chain_hash": "hex?",
		"record_id": "uuid", "supersedes_record_id": "uuid?", "sequence": "int"}
	for k, kind := range kinds {
		if !refValue(kind, r.m[k]) {
			return r, fmt.Errorf("%s", k)
		}
	}
	if _, ok := r.str["hash_algorithm"]; !ok {
		return r, fmt.Errorf("hash_algorithm")
	}
	if _, ok := r.str["payload_json"]; !ok {
		return r, fmt.Errorf("payload_json")
	}
	if r.s("hash_algorithm") != "sha256-v1" {
		return r, fmt.Errorf("algorithm")
	}
	typ := r.s("record_type")
	schema, ok := refPayloads[typ]
	if !ok {
		return r, fmt.Errorf("type")
	}
	hasOp := string(r.m["operation_id"]) != "null"
	if hasOp == (typ == "task_closed" || typ == "record_superseded") {
		return r, fmt.Errorf("operation_id")
	}
	if (string(r.m["supersedes_record_id"]) != "null") != (typ == "record_superseded") {
		return r, fmt.Errorf("supersedes")
	}
	p := []byte(r.s("payload_json"))
	pc, err := jcs.Transform(p)
	if err != nil || !bytes.Equal(pc, p) || json.Unmarshal(p, &r.payload) != nil || p[0] != '{' || len(r.payload) != len(schema) {
		return r, fmt.Errorf("payload")
	}
	for k, kind := range schema {
		raw, ok := r.payload[k]
		if !ok || !refValue(kind, raw) {
			return r, fmt.Errorf("payload %s", k)
		}
	}
	ps := func(k string) string { var s string; json.Unmarshal(r.payload[k], &s); return s }
	switch typ {
	case "exception_granted":
		if ps("expires_at") <= ps("issued_at") {
			return r, fmt.Errorf("expiry")
		}
	case "operation_denied":
		if (ps("disposition") == "escalate") != (string(r.payload["approver_class"]) != "null") {
			return r, fmt.Errorf("approver")
		}
	case "task_closed":
		if ps("closed_at") < ps("opened_at") {
			return r, fmt.Errorf("closed before opened")
		}
	}
	pd := sha256.Sum256(p)
	if hex.EncodeToString(pd[:]) != r.s("payload_digest") {
		return r, fmt.Errorf("payload digest")
	}
	rest := map[string]json.RawMessage{}
	for k, v := range r.m {
		if k != "chain_hash" {
			rest[k] = v
		}
	}
	body, err := jcs.Marshal(rest)
	if err != nil {
		return r, err
	}
	ch := sha256.Sum256(body)
	if hex.EncodeToString(ch[:]) != r.s("chain_hash") {
		return r, fmt.Errorf("chain hash")
	}
	return r, nil
}

func (r refRec) p(k string) string {
	var s string
	json.Unmarshal(r.payload[k], &s)
	return s
}

// refVerify reports whether a chain file is valid, and whether it is closed.
// expectedHead, when non-empty, must be the last record's chain_hash.
func refVerify(data []byte, expectedHead string) (ok bool, reason string) {
	if len(data) == 0 {
		return false, "empty"
	}
	if data[len(data)-1] != '\n' {
		return false, "torn tail"
	}
	var recs []refRec
	for i, line := range strings.Split(string(data[:len(data)-1]), "\n") {
		r, err := refParse([]byte(line))
		if err != nil {
			return false, fmt.Sprintf("line %d: %v", i+1, err)
		}
		if n, _ := refInt(r.m["sequence"]); n != int64(i) {
			return false, "sequence"
		}
		if i == 0 {
			if string(r.m["previous_chain_hash"]) != "null" {
				return false, "genesis"
			}
		} else if r.s("previous_chain_hash") != recs[i-1].s("chain_hash") || r.s("chain_id") != recs[0].s("chain_id") {
			return false, "link"
		}
		recs = append(recs, r)
	}
	if expectedHead != "" && recs[len(recs)-1].s("chain_hash") != expectedHead {
		return false, "head"
	}
	ids := map[string]bool{}
	closed := false
	started := int64(0)
	boundary, digest := "", ""
	type op struct {
		types    []string
		excepted map[string][][2]string // gate_id → [issued_at, expires_at] of its exceptions
		blocked  bool
	}
	ops := map[string]*op{}
	var order []string
	for i, r := range recs {
		id := r.s("record_id")
		if ids[id] {
			return false, "duplicate id"
		}
		if closed {
			return false, "after close"
		}
		if r.s("policy_id") != recs[0].s("policy_id") || r.s("policy_version") != recs[0].s("policy_version") {
			return false, "policy"
		}
		typ := r.s("record_type")
		setOnce := func(dst *string, v string) bool {
			if *dst == "" {
				*dst = v
			}
			return *dst == v
		}
		switch typ {
		case "task_closed":
			closed = true
			if !setOnce(&boundary, r.p("task_boundary_id")) {
				return false, "boundary"
			}
			if n, _ := refInt(r.payload["operation_count"]); n != started {
				return false, "count"
			}
		case "record_superseded":
			if !ids[r.s("supersedes_record_id")] {
				return false, "dangling"
			}
		default:
			o := ops[r.s("operation_id")]
			if o == nil {
				o = &op{excepted: map[string][][2]string{}}
				ops[r.s("operation_id")] = o
				order = append(order, r.s("operation_id"))
			}
			if typ == "policy_bound" {
				if !setOnce(&digest, r.p("policy_digest")) || !setOnce(&boundary, r.p("task_boundary_id")) {
					return false, "policy or boundary"
				}
			}
			if typ == "operation_started" {
				started++
			}
			if typ == "exception_granted" {
				// Any earlier exception in force at the deny's time
				// excuses it: keep every window.
				o.excepted[r.p("gate_id")] = append(o.excepted[r.p("gate_id")], [2]string{r.p("issued_at"), r.p("expires_at")})
			}
			if typ == "gate_evaluated" && r.p("decision") == "deny" && len(o.types) >= 2 {
				switch r.p("level") {
				case "hard":
					o.blocked = true
				case "soft":
					excused := false
					for _, w := range o.excepted[r.p("gate_id")] {
						if w[0] <= r.s("created_at") && r.s("created_at") <= w[1] {
							excused = true
						}
					}
					if !excused {
						o.blocked = true
					}
				}
			}
			if slices.Contains(refTerminals, typ) && o.blocked && typ != "operation_denied" {
				return false, "gate not enforced"
			}
			o.types = append(o.types, typ)
		}
		ids[id] = true
		_ = i
	}
	// Each operation's records, in order, must read
	// policy_bound [operation_started (gate|exception)* [terminal]].
	for _, id := range order {
		ts := ops[id].types
		if ts[0] != "policy_bound" {
			return false, "order: " + strings.Join(ts, ",")
		}
		rest := ts[1:]
		if len(rest) == 0 {
			continue
		}
		if rest[0] != "operation_started" {
			return false, "order: " + strings.Join(ts, ",")
		}
		rest = rest[1:]
		for len(rest) > 0 && (rest[0] == "gate_evaluated" || rest[0] == "exception_granted") {
			rest = rest[1:]
		}
		switch {
		case len(rest) == 0 && closed:
			return false, "missing terminal"
		case len(rest) == 1 && !slices.Contains(refTerminals, rest[0]):
			return false, "order: " + strings.Join(ts, ",")
		case len(rest) > 1:
			return false, "after terminal: " + strings.Join(ts, ",")
		}
	}
	_ = math.MaxInt
	return true, ""
}
