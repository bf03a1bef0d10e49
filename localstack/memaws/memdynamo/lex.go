package memdynamo

import (
	"strings"
	"unicode"
)

// tokKind is the kind of one expression token.
type tokKind uint8

const (
	tokEOF    tokKind = iota
	tokIdent          // a bare attribute name or a keyword (AND, SET, BETWEEN, ...)
	tokName           // #placeholder
	tokValue          // :placeholder
	tokNumber         // a list index inside [ ]
	tokPunct          // ( ) [ ] , . = <> < <= > >= + -
)

type token struct {
	kind tokKind
	text string
	pos  int
}

// lex splits an expression into tokens; DynamoDB's grammar needs no more
// than one character of lookahead.
func lex(expr string) ([]token, error) {
	var toks []token
	for i := 0; i < len(expr); {
		c := rune(expr[i])
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '#' || c == ':':
			j := i + 1
			for j < len(expr) && isNameChar(rune(expr[j])) {
				j++
			}
			if j == i+1 {
				return nil, validationf("Invalid expression: Syntax error; token: %q, near: %q", string(c), around(expr, i))
			}
			k := tokName
			if c == ':' {
				k = tokValue
			}
			toks = append(toks, token{kind: k, text: expr[i:j], pos: i})
			i = j
		case isNameStart(c):
			j := i + 1
			for j < len(expr) && isNameChar(rune(expr[j])) {
				j++
			}
			toks = append(toks, token{kind: tokIdent, text: expr[i:j], pos: i})
			i = j
		case '0' <= c && c <= '9':
			j := i + 1
			for j < len(expr) && '0' <= expr[j] && expr[j] <= '9' {
				j++
			}
			toks = append(toks, token{kind: tokNumber, text: expr[i:j], pos: i})
			i = j
		case strings.HasPrefix(expr[i:], "<>"), strings.HasPrefix(expr[i:], "<="), strings.HasPrefix(expr[i:], ">="):
			toks = append(toks, token{kind: tokPunct, text: expr[i : i+2], pos: i})
			i += 2
		case strings.ContainsRune("()[],.=<>+-", c):
			toks = append(toks, token{kind: tokPunct, text: string(c), pos: i})
			i++
		default:
			return nil, validationf("Invalid expression: Syntax error; token: %q, near: %q", string(c), around(expr, i))
		}
	}
	return append(toks, token{kind: tokEOF, pos: len(expr)}), nil
}

func isNameStart(c rune) bool { return c == '_' || unicode.IsLetter(c) }

func isNameChar(c rune) bool { return c == '_' || unicode.IsLetter(c) || unicode.IsDigit(c) }

func around(expr string, i int) string {
	lo, hi := max(i-8, 0), min(i+8, len(expr))
	return expr[lo:hi]
}
