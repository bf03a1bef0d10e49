package memdynamo

import (
	"math/big"
	"slices"
	"strings"
	"unicode/utf8"
)

// lookup follows p into it; ok is false when any step is absent.
func lookup(it item, p path) (value, bool) {
	if len(p) == 0 || p[0].isIdx {
		return value{}, false
	}
	v, ok := it[p[0].name]
	for _, e := range p[1:] {
		if !ok {
			return value{}, false
		}
		switch {
		case e.isIdx && v.kind == kindL && e.index < len(v.l):
			v = v.l[e.index]
		case !e.isIdx && v.kind == kindM:
			v, ok = v.m[e.name]
		default:
			return value{}, false
		}
	}
	return v, ok
}

// operandValue evaluates o against it; ok is false for an absent path.
func operandValue(it item, o operand) (value, bool, error) {
	switch o := o.(type) {
	case valueOperand:
		return o.v, true, nil
	case pathOperand:
		v, ok := lookup(it, o.p)
		return v, ok, nil
	case sizeOperand:
		v, ok := lookup(it, o.p)
		if !ok {
			return value{}, false, nil
		}
		var n int
		switch v.kind {
		case kindS:
			n = utf8.RuneCountInString(v.s)
		case kindB:
			n = len(v.s)
		case kindSS, kindNS, kindBS:
			n = len(v.set)
		case kindM:
			n = len(v.m)
		case kindL:
			n = len(v.l)
		default:
			return value{}, false, validationf("Invalid ConditionExpression: Incorrect operand type for operator or function; operator or function: size, operand type: %s", v.kind)
		}
		return numValue(new(big.Rat).SetInt64(int64(n))), true, nil
	case ifNotExists:
		if v, ok := lookup(it, o.p); ok {
			return v, true, nil
		}
		return operandValue(it, o.def)
	case listAppend:
		a, aok, err := operandValue(it, o.a)
		if err != nil {
			return value{}, false, err
		}
		b, bok, err := operandValue(it, o.b)
		if err != nil {
			return value{}, false, err
		}
		if !aok || !bok {
			return value{}, false, validationf("The provided expression refers to an attribute that does not exist in the item")
		}
		if a.kind != kindL || b.kind != kindL {
			return value{}, false, validationf("Invalid UpdateExpression: Incorrect operand type for operator or function; operator or function: list_append, operand type: %s", nonList(a, b))
		}
		return value{kind: kindL, l: append(slices.Clone(a.l), b.l...)}, true, nil
	case arith:
		a, aok, err := operandValue(it, o.a)
		if err != nil {
			return value{}, false, err
		}
		b, bok, err := operandValue(it, o.b)
		if err != nil {
			return value{}, false, err
		}
		if !aok || !bok {
			return value{}, false, validationf("The provided expression refers to an attribute that does not exist in the item")
		}
		if a.kind != kindN || b.kind != kindN {
			return value{}, false, validationf("An operand in the update expression has an incorrect data type")
		}
		r := new(big.Rat)
		if o.op == "+" {
			r.Add(a.rat(), b.rat())
		} else {
			r.Sub(a.rat(), b.rat())
		}
		return numValue(r), true, nil
	}
	return value{}, false, nil
}

func nonList(a, b value) kind {
	if a.kind != kindL {
		return a.kind
	}
	return b.kind
}

// holds evaluates a condition against it (nil: the item does not exist, so
// every path is absent). A comparison with an absent attribute is false,
// as in DynamoDB.
func holds(it item, c condition) (bool, error) {
	switch c := c.(type) {
	case andCond:
		a, err := holds(it, c.a)
		if err != nil || !a {
			return false, err
		}
		return holds(it, c.b)
	case orCond:
		a, err := holds(it, c.a)
		if err != nil || a {
			return a, err
		}
		return holds(it, c.b)
	case notCond:
		a, err := holds(it, c.c)
		return !a, err
	case cmpCond:
		a, aok, err := operandValue(it, c.a)
		if err != nil {
			return false, err
		}
		b, bok, err := operandValue(it, c.b)
		if err != nil || !aok || !bok {
			return false, err
		}
		switch c.op {
		case "=":
			return equal(a, b), nil
		case "<>":
			return !equal(a, b), nil
		}
		n, ok := compare(a, b)
		if !ok {
			return false, nil
		}
		switch c.op {
		case "<":
			return n < 0, nil
		case "<=":
			return n <= 0, nil
		case ">":
			return n > 0, nil
		default:
			return n >= 0, nil
		}
	case betweenCond:
		v, vok, err := operandValue(it, c.v)
		if err != nil {
			return false, err
		}
		lo, lok, err := operandValue(it, c.lo)
		if err != nil {
			return false, err
		}
		hi, hok, err := operandValue(it, c.hi)
		if err != nil || !vok || !lok || !hok {
			return false, err
		}
		if n, ok := compare(lo, hi); ok && n > 0 {
			return false, validationf("Invalid ConditionExpression: The BETWEEN operator requires upper bound to be greater than or equal to lower bound")
		}
		a, aok := compare(v, lo)
		b, bok := compare(v, hi)
		return aok && bok && a >= 0 && b <= 0, nil
	case inCond:
		v, ok, err := operandValue(it, c.v)
		if err != nil || !ok {
			return false, err
		}
		for _, o := range c.list {
			w, ok, err := operandValue(it, o)
			if err != nil {
				return false, err
			}
			if ok && equal(v, w) {
				return true, nil
			}
		}
		return false, nil
	case funcCond:
		return holdsFunc(it, c)
	}
	return false, nil
}

func holdsFunc(it item, c funcCond) (bool, error) {
	v, ok := lookup(it, c.p)
	switch c.fn {
	case "attribute_exists":
		return ok, nil
	case "attribute_not_exists":
		return !ok, nil
	}
	arg, argOK, err := operandValue(it, c.args[0])
	if err != nil || !ok || !argOK {
		return false, err
	}
	switch c.fn {
	case "attribute_type":
		if arg.kind != kindS {
			return false, validationf("Invalid ConditionExpression: Incorrect operand type for operator or function; operator or function: attribute_type, operand type: %s", arg.kind)
		}
		if _, known := typeByName[arg.s]; !known {
			return false, validationf("Invalid ConditionExpression: Invalid attribute type name found; type: %s, valid types: {B,NULL,SS,BOOL,L,BS,N,NS,S,M}", arg.s)
		}
		return v.kind.String() == arg.s, nil
	case "begins_with":
		if (v.kind != kindS && v.kind != kindB) || v.kind != arg.kind {
			return false, nil
		}
		return strings.HasPrefix(v.s, arg.s), nil
	case "contains":
		switch v.kind {
		case kindS:
			return arg.kind == kindS && strings.Contains(v.s, arg.s), nil
		case kindB:
			return arg.kind == kindB && strings.Contains(v.s, arg.s), nil
		case kindSS, kindNS, kindBS:
			elem := map[kind]kind{kindSS: kindS, kindNS: kindN, kindBS: kindB}[v.kind]
			return arg.kind == elem && slices.Contains(v.set, arg.s), nil
		case kindL:
			return slices.ContainsFunc(v.l, func(e value) bool { return equal(e, arg) }), nil
		}
	}
	return false, nil
}

var typeByName = map[string]kind{
	"S": kindS, "N": kindN, "B": kindB, "SS": kindSS, "NS": kindNS, "BS": kindBS,
	"M": kindM, "L": kindL, "NULL": kindNULL, "BOOL": kindBOOL,
}

// apply runs an update's actions on a copy of old (nil: a new item holding
// key) and returns the new item. Every operand is evaluated against the
// item as it was before the update, as DynamoDB does.
func apply(old item, key item, u update) (item, error) {
	before := old
	if before == nil {
		before = key
	}
	out := before.clone()
	if err := checkOverlap(u, key); err != nil {
		return nil, err
	}
	for _, a := range u.set {
		v, ok, err := operandValue(before, a.val)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, validationf("The provided expression refers to an attribute that does not exist in the item")
		}
		if err := assign(out, a.p, v); err != nil {
			return nil, err
		}
	}
	for _, p := range u.remove {
		removePath(out, p)
	}
	for _, a := range u.add {
		cur, ok := lookup(out, a.p)
		var next value
		switch {
		case a.v.kind == kindN && !ok:
			next = a.v
		case a.v.kind == kindN && cur.kind == kindN:
			next = numValue(new(big.Rat).Add(cur.rat(), a.v.rat()))
		case isSet(a.v.kind) && !ok:
			next = a.v
		case isSet(a.v.kind) && cur.kind == a.v.kind:
			next = value{kind: cur.kind, set: union(cur.set, a.v.set)}
		default:
			return nil, validationf("Invalid UpdateExpression: Incorrect operand type for operator or function; operator: ADD, operand type: %s", a.v.kind)
		}
		if err := assign(out, a.p, next); err != nil {
			return nil, err
		}
	}
	for _, d := range u.delete {
		cur, ok := lookup(out, d.p)
		if !isSet(d.v.kind) {
			return nil, validationf("Invalid UpdateExpression: Incorrect operand type for operator or function; operator: DELETE, operand type: %s", d.v.kind)
		}
		if !ok {
			continue
		}
		if cur.kind != d.v.kind {
			return nil, validationf("An operand in the update expression has an incorrect data type")
		}
		rest := slices.DeleteFunc(slices.Clone(cur.set), func(e string) bool { return slices.Contains(d.v.set, e) })
		if len(rest) == 0 {
			removePath(out, d.p)
		} else if err := assign(out, d.p, value{kind: cur.kind, set: rest}); err != nil {
			return nil, err
		}
	}
	for name, kv := range key {
		if v, ok := out[name]; !ok || !equal(v, kv) {
			return nil, validationf("One or more parameter values were invalid: Cannot update attribute %s. This attribute is part of the key", name)
		}
	}
	return out, nil
}

func isSet(k kind) bool { return k == kindSS || k == kindNS || k == kindBS }

func union(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// checkOverlap refuses an update whose two actions touch overlapping
// paths, and one that changes a key attribute, as DynamoDB does.
func checkOverlap(u update, key item) error {
	var paths []path
	for _, a := range u.set {
		paths = append(paths, a.p)
	}
	paths = append(paths, u.remove...)
	for _, a := range u.add {
		paths = append(paths, a.p)
	}
	for _, d := range u.delete {
		paths = append(paths, d.p)
	}
	for i, a := range paths {
		if _, isKey := key[a[0].name]; isKey && !a[0].isIdx {
			return validationf("One or more parameter values were invalid: Cannot update attribute %s. This attribute is part of the key", a[0].name)
		}
		for _, b := range paths[i+1:] {
			if isPrefix(a, b) || isPrefix(b, a) {
				return validationf("Invalid UpdateExpression: Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [%s], path two: [%s]", a, b)
			}
		}
	}
	return nil
}

func isPrefix(a, b path) bool {
	if len(a) > len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// assign sets the value at p, creating nothing but the last step: a
// missing parent is an error, as in DynamoDB.
func assign(it item, p path, v value) error {
	if len(p) == 1 {
		it[p[0].name] = v
		return nil
	}
	parent, ok := lookup(it, p[:len(p)-1])
	if !ok {
		return validationf("The document path provided in the update expression is invalid for update")
	}
	last := p[len(p)-1]
	switch {
	case last.isIdx && parent.kind == kindL:
		l := slices.Clone(parent.l)
		if last.index < len(l) {
			l[last.index] = v
		} else {
			l = append(l, v)
		}
		return assign(it, p[:len(p)-1], value{kind: kindL, l: l})
	case !last.isIdx && parent.kind == kindM:
		m := make(map[string]value, len(parent.m)+1)
		for k, e := range parent.m {
			m[k] = e
		}
		m[last.name] = v
		return assign(it, p[:len(p)-1], value{kind: kindM, m: m})
	}
	return validationf("The document path provided in the update expression is invalid for update")
}

func removePath(it item, p path) {
	if len(p) == 1 {
		delete(it, p[0].name)
		return
	}
	parent, ok := lookup(it, p[:len(p)-1])
	if !ok {
		return
	}
	last := p[len(p)-1]
	switch {
	case last.isIdx && parent.kind == kindL && last.index < len(parent.l):
		l := slices.Delete(slices.Clone(parent.l), last.index, last.index+1)
		_ = assign(it, p[:len(p)-1], value{kind: kindL, l: l})
	case !last.isIdx && parent.kind == kindM:
		m := make(map[string]value, len(parent.m))
		for k, e := range parent.m {
			if k != last.name {
				m[k] = e
			}
		}
		_ = assign(it, p[:len(p)-1], value{kind: kindM, m: m})
	}
}

// project keeps only the attributes the paths name (top-level granularity
// for nested paths: the nested value is cut down to what the path names).
func project(it item, paths []path) item {
	if paths == nil || it == nil {
		return it
	}
	out := item{}
	for _, p := range paths {
		v, ok := lookup(it, p)
		if !ok {
			continue
		}
		if len(p) == 1 {
			out[p[0].name] = v
			continue
		}
		mergeProjected(out, p, v)
	}
	return out
}

// mergeProjected writes v at p in out, building the maps and lists on the
// way (a projected list element lands in a list of the elements named).
func mergeProjected(out item, p path, v value) {
	cur := out[p[0].name]
	out[p[0].name] = withPath(cur, p[1:], v)
}

func withPath(cur value, p path, v value) value {
	if len(p) == 0 {
		return v
	}
	e := p[0]
	if e.isIdx {
		var l []value
		if cur.kind == kindL {
			l = cur.l
		}
		return value{kind: kindL, l: append(l, withPath(value{}, p[1:], v))}
	}
	m := map[string]value{}
	if cur.kind == kindM {
		m = cur.m
	}
	m[e.name] = withPath(m[e.name], p[1:], v)
	return value{kind: kindM, m: m}
}
