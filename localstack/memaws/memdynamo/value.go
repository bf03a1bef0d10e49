package memdynamo

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strings"
)

// kind is an attribute value's DynamoDB type.
type kind uint8

const (
	kindS kind = iota + 1
	kindN
	kindB
	kindSS
	kindNS
	kindBS
	kindM
	kindL
	kindNULL
	kindBOOL
)

var kindNames = map[kind]string{
	kindS: "S", kindN: "N", kindB: "B", kindSS: "SS", kindNS: "NS", kindBS: "BS",
	kindM: "M", kindL: "L", kindNULL: "NULL", kindBOOL: "BOOL",
}

func (k kind) String() string { return kindNames[k] }

// value is one attribute value. Numbers are kept in their canonical decimal
// form (what DynamoDB returns), sets sorted, so equal values have equal
// encodings and the state digest is deterministic.
type value struct {
	kind kind
	s    string // S, N (canonical decimal), B (raw bytes)
	set  []string
	m    map[string]value
	l    []value
	b    bool // BOOL, NULL
}

// item is a stored item: attribute name → value.
type item map[string]value

func numValue(r *big.Rat) value { return value{kind: kindN, s: formatNumber(r)} }

// rat is a number value's exact value.
func (v value) rat() *big.Rat {
	r, _ := new(big.Rat).SetString(v.s) // canonical numbers always parse
	return r
}

// UnmarshalJSON reads the wire form {"S": "x"}, {"N": "1"}, {"M": {...}}, ...
func (v *value) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("attribute value: %w", err)
	}
	if len(raw) != 1 {
		return validationf("Supplied AttributeValue has %d data types; exactly one is required", len(raw))
	}
	for name, body := range raw {
		return v.decode(name, body)
	}
	return nil
}

func (v *value) decode(name string, body json.RawMessage) error {
	switch name {
	case "S":
		v.kind = kindS
		return json.Unmarshal(body, &v.s)
	case "N":
		var s string
		if err := json.Unmarshal(body, &s); err != nil {
			return err
		}
		n, err := canonicalNumber(s)
		if err != nil {
			return err
		}
		*v = value{kind: kindN, s: n}
	case "B":
		var b []byte
		if err := json.Unmarshal(body, &b); err != nil {
			return err
		}
		*v = value{kind: kindB, s: string(b)}
	case "SS", "NS", "BS":
		var elems []string
		if name == "BS" {
			var bs [][]byte
			if err := json.Unmarshal(body, &bs); err != nil {
				return err
			}
			for _, b := range bs {
				elems = append(elems, string(b))
			}
		} else if err := json.Unmarshal(body, &elems); err != nil {
			return err
		}
		if len(elems) == 0 {
			return validationf("One or more parameter values were invalid: An number set  may not be empty")
		}
		k := map[string]kind{"SS": kindSS, "NS": kindNS, "BS": kindBS}[name]
		if k == kindNS {
			for i, e := range elems {
				n, err := canonicalNumber(e)
				if err != nil {
					return err
				}
				elems[i] = n
			}
		}
		sorted := slices.Clone(elems)
		sort.Strings(sorted)
		if len(slices.Compact(sorted)) != len(elems) {
			return validationf("One or more parameter values were invalid: Input collection %v contains duplicates.", elems)
		}
		*v = value{kind: k, set: slices.Compact(sorted)}
	case "M":
		var m map[string]value
		if err := json.Unmarshal(body, &m); err != nil {
			return err
		}
		if m == nil {
			m = map[string]value{}
		}
		*v = value{kind: kindM, m: m}
	case "L":
		var l []value
		if err := json.Unmarshal(body, &l); err != nil {
			return err
		}
		*v = value{kind: kindL, l: l}
	case "NULL":
		var b bool
		if err := json.Unmarshal(body, &b); err != nil {
			return err
		}
		if !b {
			return validationf("One or more parameter values were invalid: Null attribute value types must have the value of true")
		}
		*v = value{kind: kindNULL, b: true}
	case "BOOL":
		var b bool
		if err := json.Unmarshal(body, &b); err != nil {
			return err
		}
		*v = value{kind: kindBOOL, b: b}
	default:
		return validationf("Supplied AttributeValue has an unknown data type %q", name)
	}
	return nil
}

// MarshalJSON writes the wire form.
func (v value) MarshalJSON() ([]byte, error) {
	var body any
	switch v.kind {
	case kindS, kindN:
		body = v.s
	case kindB:
		body = base64.StdEncoding.EncodeToString([]byte(v.s))
	case kindSS, kindNS:
		body = v.set
	case kindBS:
		enc := make([]string, len(v.set))
		for i, e := range v.set {
			enc[i] = base64.StdEncoding.EncodeToString([]byte(e))
		}
		body = enc
	case kindM:
		body = v.m
	case kindL:
		body = v.l
	case kindNULL, kindBOOL:
		body = v.b
	default:
		return nil, fmt.Errorf("attribute value of no type")
	}
	return json.Marshal(map[string]any{v.kind.String(): body})
}

// canonicalNumber validates a DynamoDB number and returns the form DynamoDB
// stores and returns: no exponent, no leading zeros, no trailing fraction
// zeros, no "-0".
func canonicalNumber(s string) (string, error) {
	t := strings.TrimSpace(s)
	if t == "" || strings.ContainsAny(t, "xX_/") {
		return "", validationf("The parameter cannot be converted to a numeric value: %s", s)
	}
	r, ok := new(big.Rat).SetString(t)
	if !ok {
		return "", validationf("The parameter cannot be converted to a numeric value: %s", s)
	}
	out := formatNumber(r)
	if digits := len(strings.Trim(strings.NewReplacer("-", "", ".", "").Replace(out), "0")); digits > 38 {
		return "", validationf("Attempting to store more than 38 significant digits in a Number")
	}
	return out, nil
}

// formatNumber writes r, a terminating decimal, exactly.
func formatNumber(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	den := new(big.Int).Set(r.Denom())
	places := 0
	ten := big.NewInt(10)
	for scaled := new(big.Int).Set(r.Num()); places < 400; places++ {
		if new(big.Int).Mod(scaled, den).Sign() == 0 {
			break
		}
		scaled.Mul(scaled, ten)
	}
	out := r.FloatString(places)
	if strings.Contains(out, ".") {
		out = strings.TrimRight(strings.TrimRight(out, "0"), ".")
	}
	return out
}

// equal reports whether a and b are the same value (sets compare as sets).
func equal(a, b value) bool {
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case kindS, kindB:
		return a.s == b.s
	case kindN:
		return a.rat().Cmp(b.rat()) == 0
	case kindSS, kindNS, kindBS:
		return slices.Equal(a.set, b.set)
	case kindM:
		if len(a.m) != len(b.m) {
			return false
		}
		for k, av := range a.m {
			bv, ok := b.m[k]
			if !ok || !equal(av, bv) {
				return false
			}
		}
		return true
	case kindL:
		return slices.EqualFunc(a.l, b.l, equal)
	default:
		return a.b == b.b
	}
}

// compare orders two values of one scalar type (S, N or B), as DynamoDB's
// <, <=, >, >= and BETWEEN do; ok is false when they cannot be ordered.
func compare(a, b value) (c int, ok bool) {
	if a.kind != b.kind {
		return 0, false
	}
	switch a.kind {
	case kindS, kindB:
		return bytes.Compare([]byte(a.s), []byte(b.s)), true
	case kindN:
		return a.rat().Cmp(b.rat()), true
	}
	return 0, false
}

// size is a value's size as DynamoDB counts it towards the 400 KB item
// limit (strings and binaries by length, numbers by significant digits,
// containers with their overhead).
func (v value) size() int {
	switch v.kind {
	case kindS, kindB:
		return len(v.s)
	case kindN:
		return numberSize(v.s)
	case kindSS, kindBS:
		n := 0
		for _, e := range v.set {
			n += len(e)
		}
		return n
	case kindNS:
		n := 0
		for _, e := range v.set {
			n += numberSize(e)
		}
		return n
	case kindM:
		n := 3
		for k, e := range v.m {
			n += len(k) + e.size() + 1
		}
		return n
	case kindL:
		n := 3
		for _, e := range v.l {
			n += e.size() + 1
		}
		return n
	default:
		return 1
	}
}

func numberSize(s string) int {
	digits := len(strings.Trim(strings.NewReplacer("-", "", ".", "").Replace(s), "0"))
	return (digits+1)/2 + 1
}

// size of an item: names plus values.
func (it item) size() int {
	n := 0
	for k, v := range it {
		n += len(k) + v.size()
	}
	return n
}

// clone copies an item deeply enough that changing the copy's values
// (containers included) leaves the original as it was.
func (it item) clone() item {
	if it == nil {
		return nil
	}
	out := make(item, len(it))
	for k, v := range it {
		out[k] = v.clone()
	}
	return out
}

func (v value) clone() value {
	out := v
	if v.set != nil {
		out.set = slices.Clone(v.set)
	}
	if v.m != nil {
		out.m = make(map[string]value, len(v.m))
		for k, e := range v.m {
			out.m[k] = e.clone()
		}
	}
	if v.l != nil {
		out.l = make([]value, len(v.l))
		for i, e := range v.l {
			out.l[i] = e.clone()
		}
	}
	return out
}
