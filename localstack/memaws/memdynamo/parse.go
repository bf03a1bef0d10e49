package memdynamo

import (
	_ "embed"
	"strconv"
	"strings"
)

// reservedWords are DynamoDB's reserved words (the list in the DynamoDB
// Developer Guide, "Reserved words in DynamoDB"): a bare attribute name
// that is one of them makes DynamoDB refuse the expression, so a store
// that accepted it would hide a bug that AWS shows.
//
//go:embed reserved_words.txt
var reservedWordList string

func reservedWords() map[string]bool {
	words := map[string]bool{}
	for _, w := range strings.Fields(reservedWordList) {
		words[w] = true
	}
	return words
}

// pathElem is one step of a document path: an attribute or map key, or a
// list index.
type pathElem struct {
	name  string
	index int
	isIdx bool
}

type path []pathElem

func (p path) String() string {
	var b strings.Builder
	for i, e := range p {
		switch {
		case e.isIdx:
			b.WriteString("[" + strconv.Itoa(e.index) + "]")
		case i > 0:
			b.WriteString("." + e.name)
		default:
			b.WriteString(e.name)
		}
	}
	return b.String()
}

// operand is something that evaluates to a value (or to nothing, when a
// path names an absent attribute).
type operand interface{ isOperand() }

type (
	pathOperand  struct{ p path }
	valueOperand struct{ v value }
	sizeOperand  struct{ p path }
	// ifNotExists, listAppend and arith occur only in SET actions.
	ifNotExists struct {
		p   path
		def operand
	}
	listAppend struct{ a, b operand }
	arith      struct {
		op   string // "+" or "-"
		a, b operand
	}
)

func (pathOperand) isOperand()  {}
func (valueOperand) isOperand() {}
func (sizeOperand) isOperand()  {}
func (ifNotExists) isOperand()  {}
func (listAppend) isOperand()   {}
func (arith) isOperand()        {}

// condition is a parsed condition, filter or key condition expression.
type condition interface{ isCondition() }

type (
	cmpCond struct {
		op   string
		a, b operand
	}
	betweenCond struct{ v, lo, hi operand }
	inCond      struct {
		v    operand
		list []operand
	}
	funcCond struct {
		fn   string // attribute_exists, attribute_not_exists, attribute_type, begins_with, contains
		p    path
		args []operand
	}
	andCond struct{ a, b condition }
	orCond  struct{ a, b condition }
	notCond struct{ c condition }
)

func (cmpCond) isCondition()     {}
func (betweenCond) isCondition() {}
func (inCond) isCondition()      {}
func (funcCond) isCondition()    {}
func (andCond) isCondition()     {}
func (orCond) isCondition()      {}
func (notCond) isCondition()     {}

// update is a parsed update expression, its actions in the order written.
type update struct {
	set    []setAction
	remove []path
	add    []pathValue
	delete []pathValue
}

type setAction struct {
	p   path
	val operand
}

type pathValue struct {
	p path
	v value
}

// parser reads one expression, resolving #names and :values from the
// request and recording which ones it used, so the request can be refused
// when it supplies placeholders no expression uses (as DynamoDB does).
type parser struct {
	toks     []token
	i        int
	expr     string
	what     string // "ConditionExpression", "UpdateExpression", ...
	names    map[string]string
	values   map[string]value
	reserved map[string]bool
	used     *placeholders
}

// placeholders records the #names and :values the expressions of one
// request used.
type placeholders struct {
	names, values map[string]bool
}

func newPlaceholders() *placeholders {
	return &placeholders{names: map[string]bool{}, values: map[string]bool{}}
}

func (s *Server) newParser(what, expr string, names map[string]string, values map[string]value, used *placeholders) (*parser, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, validationf("Invalid %s: %s", what, strings.TrimPrefix(err.Error(), "Invalid expression: "))
	}
	return &parser{toks: toks, expr: expr, what: what, names: names, values: values, reserved: s.reserved, used: used}, nil
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tokEOF {
		p.i++
	}
	return t
}

func (p *parser) isKeyword(word string) bool {
	t := p.peek()
	return t.kind == tokIdent && strings.EqualFold(t.text, word)
}

func (p *parser) isPunct(s string) bool {
	t := p.peek()
	return t.kind == tokPunct && t.text == s
}

func (p *parser) errorf(format string, args ...any) error {
	return validationf("Invalid %s: "+format, append([]any{p.what}, args...)...)
}

func (p *parser) syntaxError() error {
	t := p.peek()
	if t.kind == tokEOF {
		return p.errorf("Syntax error; token: <EOF>, near: %q", around(p.expr, t.pos))
	}
	return p.errorf("Syntax error; token: %q, near: %q", t.text, around(p.expr, t.pos))
}

func (p *parser) expectPunct(s string) error {
	if !p.isPunct(s) {
		return p.syntaxError()
	}
	p.next()
	return nil
}

func (p *parser) expectEOF() error {
	if p.peek().kind != tokEOF {
		return p.syntaxError()
	}
	return nil
}

// parsePath reads name(.name|[n])*.
func (p *parser) parsePath() (path, error) {
	first, err := p.pathName()
	if err != nil {
		return nil, err
	}
	out := path{{name: first}}
	for {
		switch {
		case p.isPunct("."):
			p.next()
			n, err := p.pathName()
			if err != nil {
				return nil, err
			}
			out = append(out, pathElem{name: n})
		case p.isPunct("["):
			p.next()
			t := p.next()
			if t.kind != tokNumber {
				return nil, p.errorf("Syntax error; token: %q, near: %q", t.text, around(p.expr, t.pos))
			}
			idx, err := strconv.Atoi(t.text)
			if err != nil {
				return nil, p.errorf("invalid list index %q", t.text)
			}
			if err := p.expectPunct("]"); err != nil {
				return nil, err
			}
			out = append(out, pathElem{index: idx, isIdx: true})
		default:
			return out, nil
		}
	}
}

func (p *parser) pathName() (string, error) {
	t := p.next()
	switch t.kind {
	case tokName:
		name, ok := p.names[t.text]
		if !ok {
			return "", p.errorf("An expression attribute name used in the document path is not defined; attribute name: %s", t.text)
		}
		p.used.names[t.text] = true
		return name, nil
	case tokIdent:
		if p.reserved[strings.ToUpper(t.text)] {
			return "", p.errorf("Attribute name is a reserved keyword; reserved keyword: %s", t.text)
		}
		return t.text, nil
	}
	p.i--
	return "", p.syntaxError()
}

func (p *parser) valueRef() (value, error) {
	t := p.next()
	v, ok := p.values[t.text]
	if !ok {
		return value{}, p.errorf("An expression attribute value used in expression is not defined; attribute value: %s", t.text)
	}
	p.used.values[t.text] = true
	return v, nil
}

// parseOperand reads a path, a :value or size(path).
func (p *parser) parseOperand() (operand, error) {
	t := p.peek()
	switch {
	case t.kind == tokValue:
		v, err := p.valueRef()
		return valueOperand{v}, err
	case t.kind == tokIdent && strings.EqualFold(t.text, "size") && p.toks[p.i+1].text == "(":
		p.next()
		p.next()
		pth, err := p.parsePath()
		if err != nil {
			return nil, err
		}
		return sizeOperand{pth}, p.expectPunct(")")
	case t.kind == tokName || t.kind == tokIdent:
		pth, err := p.parsePath()
		return pathOperand{pth}, err
	}
	return nil, p.syntaxError()
}

// parseCondition reads a whole condition: OR binds loosest, then AND, then
// NOT, then comparisons, BETWEEN, IN and functions.
func (p *parser) parseCondition() (condition, error) {
	c, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.isKeyword("OR") {
		p.next()
		d, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		c = orCond{c, d}
	}
	return c, nil
}

func (p *parser) parseAnd() (condition, error) {
	c, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.isKeyword("AND") {
		p.next()
		d, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		c = andCond{c, d}
	}
	return c, nil
}

func (p *parser) parseNot() (condition, error) {
	if p.isKeyword("NOT") {
		p.next()
		c, err := p.parseNot()
		return notCond{c}, err
	}
	return p.parsePrimary()
}

var conditionFuncs = map[string]int{ // function → number of arguments after the path
	"attribute_exists": 0, "attribute_not_exists": 0, "attribute_type": 1, "begins_with": 1, "contains": 1,
}

func (p *parser) parsePrimary() (condition, error) {
	if p.isPunct("(") {
		p.next()
		c, err := p.parseCondition()
		if err != nil {
			return nil, err
		}
		return c, p.expectPunct(")")
	}
	t := p.peek()
	if t.kind == tokIdent && p.toks[p.i+1].text == "(" {
		fn := strings.ToLower(t.text)
		nargs, ok := conditionFuncs[fn]
		if ok {
			p.next()
			p.next()
			pth, err := p.parsePath()
			if err != nil {
				return nil, err
			}
			c := funcCond{fn: fn, p: pth}
			for range nargs {
				if err := p.expectPunct(","); err != nil {
					return nil, err
				}
				a, err := p.parseOperand()
				if err != nil {
					return nil, err
				}
				c.args = append(c.args, a)
			}
			return c, p.expectPunct(")")
		}
		if fn != "size" {
			return nil, p.errorf("Invalid function name; function: %s", t.text)
		}
	}
	a, err := p.parseOperand()
	if err != nil {
		return nil, err
	}
	switch {
	case p.isKeyword("BETWEEN"):
		p.next()
		lo, err := p.parseOperand()
		if err != nil {
			return nil, err
		}
		if !p.isKeyword("AND") {
			return nil, p.syntaxError()
		}
		p.next()
		hi, err := p.parseOperand()
		return betweenCond{a, lo, hi}, err
	case p.isKeyword("IN"):
		p.next()
		if err := p.expectPunct("("); err != nil {
			return nil, err
		}
		c := inCond{v: a}
		for {
			o, err := p.parseOperand()
			if err != nil {
				return nil, err
			}
			c.list = append(c.list, o)
			if !p.isPunct(",") {
				break
			}
			p.next()
		}
		return c, p.expectPunct(")")
	}
	op := p.peek()
	if op.kind != tokPunct || !strings.Contains(" = <> < <= > >= ", " "+op.text+" ") {
		return nil, p.syntaxError()
	}
	p.next()
	b, err := p.parseOperand()
	return cmpCond{op.text, a, b}, err
}

// parseUpdate reads SET, REMOVE, ADD and DELETE clauses, each at most once.
func (p *parser) parseUpdate() (update, error) {
	var u update
	seen := map[string]bool{}
	for p.peek().kind != tokEOF {
		t := p.next()
		clause := strings.ToUpper(t.text)
		if t.kind != tokIdent || !strings.Contains(" SET REMOVE ADD DELETE ", " "+clause+" ") {
			p.i--
			return u, p.syntaxError()
		}
		if seen[clause] {
			return u, p.errorf("The %q section can only be used once in an update expression;", clause)
		}
		seen[clause] = true
		for {
			if err := p.parseAction(clause, &u); err != nil {
				return u, err
			}
			if !p.isPunct(",") {
				break
			}
			p.next()
		}
	}
	if len(seen) == 0 {
		return u, p.errorf("The expression can not be empty;")
	}
	return u, nil
}

func (p *parser) parseAction(clause string, u *update) error {
	pth, err := p.parsePath()
	if err != nil {
		return err
	}
	switch clause {
	case "SET":
		if err := p.expectPunct("="); err != nil {
			return err
		}
		v, err := p.parseSetValue()
		if err != nil {
			return err
		}
		u.set = append(u.set, setAction{pth, v})
	case "REMOVE":
		u.remove = append(u.remove, pth)
	case "ADD", "DELETE":
		if p.peek().kind != tokValue {
			return p.syntaxError()
		}
		v, err := p.valueRef()
		if err != nil {
			return err
		}
		pv := pathValue{pth, v}
		if clause == "ADD" {
			u.add = append(u.add, pv)
		} else {
			u.delete = append(u.delete, pv)
		}
	}
	return nil
}

// parseSetValue reads operand [(+|-) operand], where an operand may also be
// if_not_exists(path, operand) or list_append(operand, operand).
func (p *parser) parseSetValue() (operand, error) {
	a, err := p.parseSetOperand()
	if err != nil {
		return nil, err
	}
	if p.isPunct("+") || p.isPunct("-") {
		op := p.next().text
		b, err := p.parseSetOperand()
		if err != nil {
			return nil, err
		}
		return arith{op, a, b}, nil
	}
	return a, nil
}

func (p *parser) parseSetOperand() (operand, error) {
	t := p.peek()
	if t.kind == tokIdent && p.toks[p.i+1].text == "(" {
		switch strings.ToLower(t.text) {
		case "if_not_exists":
			p.next()
			p.next()
			pth, err := p.parsePath()
			if err != nil {
				return nil, err
			}
			if err := p.expectPunct(","); err != nil {
				return nil, err
			}
			def, err := p.parseSetOperand()
			if err != nil {
				return nil, err
			}
			return ifNotExists{pth, def}, p.expectPunct(")")
		case "list_append":
			p.next()
			p.next()
			a, err := p.parseSetOperand()
			if err != nil {
				return nil, err
			}
			if err := p.expectPunct(","); err != nil {
				return nil, err
			}
			b, err := p.parseSetOperand()
			if err != nil {
				return nil, err
			}
			return listAppend{a, b}, p.expectPunct(")")
		default:
			return nil, p.errorf("Invalid function name; function: %s", t.text)
		}
	}
	switch t.kind {
	case tokValue:
		v, err := p.valueRef()
		return valueOperand{v}, err
	case tokName, tokIdent:
		pth, err := p.parsePath()
		return pathOperand{pth}, err
	}
	return nil, p.syntaxError()
}

// parseProjection reads a comma-separated list of paths.
func (p *parser) parseProjection() ([]path, error) {
	var out []path
	for {
		pth, err := p.parsePath()
		if err != nil {
			return nil, err
		}
		out = append(out, pth)
		if !p.isPunct(",") {
			return out, p.expectEOF()
		}
		p.next()
	}
}
