package memsqs

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// message is one message on a queue.
type message struct {
	// serial orders the messages of a queue (send order, which is FIFO
	// order) and names the message in receipt handles.
	serial uint64
	id     string
	body   string
	attrs  map[string]attrValue
	// trace is the AWSTraceHeader system attribute, if sent.
	trace *attrValue

	md5Body, md5Attrs, md5System string

	group, dedupID, seq string
	sender              string
	// sentAt is SentTimestamp; it survives a move to the dead-letter queue.
	sentAt time.Time
	// enqueuedAt starts the retention period (reset by a move to a FIFO
	// dead-letter queue, kept by a move to a standard one, as SQS does).
	enqueuedAt time.Time
	// visibleAt ends a delay (never received) or a visibility timeout.
	visibleAt time.Time

	receives     int
	firstReceive time.Time
	// receivedAt is the latest receive, from which SQS's 12-hour cap on a
	// message's total visibility timeout counts.
	receivedAt time.Time
	// receipt is the counter value of the latest receipt handle; 0 when
	// the message was never received (in this queue).
	receipt uint64
	// dlqSource is the ARN of the queue a dead-lettered message came from.
	dlqSource string
}

// inFlight: received and its visibility timeout not over.
func (m *message) inFlight(now time.Time) bool {
	return m.receipt != 0 && now.Before(m.visibleAt)
}

// delayed: never received and its delay not over.
func (m *message) delayed(now time.Time) bool {
	return m.receipt == 0 && now.Before(m.visibleAt)
}

func (m *message) available(now time.Time) bool { return !now.Before(m.visibleAt) }

// attrValue is a message attribute as stored.
type attrValue struct {
	dataType string
	str      string
	bin      []byte
}

func (a attrValue) binary() bool { return strings.HasPrefix(a.dataType, "Binary") }

// wireAttr is a message attribute on the wire (Binary as base64).
type wireAttr struct {
	DataType         string   `json:"DataType"`
	StringValue      *string  `json:"StringValue,omitempty"`
	BinaryValue      []byte   `json:"BinaryValue,omitempty"`
	StringListValues []string `json:"StringListValues,omitempty"`
	BinaryListValues [][]byte `json:"BinaryListValues,omitempty"`
}

func (a attrValue) wire() wireAttr {
	if a.binary() {
		return wireAttr{DataType: a.dataType, BinaryValue: a.bin}
	}
	s := a.str
	return wireAttr{DataType: a.dataType, StringValue: &s}
}

// maxAttributes is SQS's limit of message attributes per message.
const maxAttributes = 10

// parseAttributes validates message attributes as SQS does and returns
// them with the bytes they count towards the message size.
func parseAttributes(in map[string]wireAttr) (map[string]attrValue, int, *apiError) {
	if len(in) == 0 {
		return nil, 0, nil
	}
	if len(in) > maxAttributes {
		return nil, 0, errInvalidParameter("Number of message attributes [%d] exceeds the allowed maximum [%d].", len(in), maxAttributes)
	}
	out := make(map[string]attrValue, len(in))
	size := 0
	for _, name := range sortedKeys(in) {
		w := in[name]
		if aerr := checkAttributeName(name); aerr != nil {
			return nil, 0, aerr
		}
		a, aerr := parseAttribute(name, w)
		if aerr != nil {
			return nil, 0, aerr
		}
		out[name] = a
		size += len(name) + len(a.dataType) + len(a.str) + len(a.bin)
	}
	return out, size, nil
}

func checkAttributeName(name string) *apiError {
	lower := strings.ToLower(name)
	switch {
	case len(name) == 0 || len(name) > 256 || strings.IndexFunc(name, notAttrNameChar) >= 0:
		return errInvalidParameter("Message (user) attribute name '%s' is invalid: it can contain only alphanumerics, hyphens, underscores and periods, and be 1 to 256 characters long.", name)
	case strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon."):
		return errInvalidParameter("Message (user) attribute name '%s' is reserved for use by Amazon Web Services.", name)
	case strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, ".."):
		return errInvalidParameter("Message (user) attribute name '%s' must not start or end with a period or have two periods in a row.", name)
	}
	return nil
}

func parseAttribute(name string, w wireAttr) (attrValue, *apiError) {
	if w.DataType == "" {
		return attrValue{}, errInvalidParameter("The message attribute '%s' must contain non-empty message attribute type.", name)
	}
	if len(w.DataType) > 256 {
		return attrValue{}, errInvalidParameter("The message attribute '%s' has a type longer than 256 characters.", name)
	}
	if len(w.StringListValues) > 0 || len(w.BinaryListValues) > 0 {
		return attrValue{}, errInvalidParameter("Message attribute list values in SendMessage operation are not supported (attribute '%s').", name)
	}
	base, custom, _ := strings.Cut(w.DataType, ".")
	if strings.Contains(w.DataType, ".") && custom == "" {
		return attrValue{}, errInvalidParameter("The type of message (user) attribute '%s' is invalid: empty custom type label.", name)
	}
	switch base {
	case "String", "Number":
		if w.StringValue == nil || *w.StringValue == "" {
			return attrValue{}, errInvalidParameter("The message attribute '%s' must contain non-empty message attribute value for message attribute type '%s'.", name, base)
		}
		if w.BinaryValue != nil {
			return attrValue{}, errInvalidParameter("The message attribute '%s' with type '%s' must use field 'String'.", name, base)
		}
		if !validText(*w.StringValue) {
			return attrValue{}, newError("InvalidMessageContents", "Invalid character in the value of message attribute '%s'; "+allowedChars, name)
		}
		if base == "Number" && !validNumber(*w.StringValue) {
			return attrValue{}, errInvalidParameter("Can't cast the value of message (user) attribute '%s' to a number.", name)
		}
		return attrValue{dataType: w.DataType, str: *w.StringValue}, nil
	case "Binary":
		if len(w.BinaryValue) == 0 {
			return attrValue{}, errInvalidParameter("The message attribute '%s' must contain non-empty message attribute value for message attribute type 'Binary'.", name)
		}
		if w.StringValue != nil {
			return attrValue{}, errInvalidParameter("The message attribute '%s' with type 'Binary' must use field 'Binary'.", name)
		}
		return attrValue{dataType: w.DataType, bin: append([]byte(nil), w.BinaryValue...)}, nil
	default:
		return attrValue{}, errInvalidParameter("The type of message (user) attribute '%s' is invalid. You must use only the following supported type prefixes: Binary, Number, String.", name)
	}
}

func notAttrNameChar(r rune) bool { return !isAlnum(r) && r != '_' && r != '-' && r != '.' }

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// validNumber accepts a decimal number ([+-]digits[.digits][e[+-]digits])
// of at most 38 significant digits, SQS's precision for Number.
func validNumber(s string) bool {
	mantissa, exponent, hasExp := strings.Cut(strings.ToLower(trimSign(s)), "e")
	if hasExp {
		exponent = trimSign(exponent)
		if exponent == "" || !allDigits(exponent) {
			return false
		}
	}
	whole, frac, _ := strings.Cut(mantissa, ".")
	if whole+frac == "" || !allDigits(whole) || !allDigits(frac) {
		return false
	}
	significant := strings.TrimRight(strings.TrimLeft(whole+frac, "0"), "0")
	return len(significant) <= 38
}

func trimSign(s string) string {
	if strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-") {
		return s[1:]
	}
	return s
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

const allowedChars = "the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF"

// validText reports whether s holds only the characters SQS accepts in a
// message body or string attribute.
func validText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF:
		case r >= 0xE000 && r <= 0xFFFD:
		case r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}

// md5Hex is the digest SQS returns for a body (MD5OfMessageBody,
// MD5OfBody), which the SDK recomputes and compares.
func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// md5OfAttributes is SQS's MD5OfMessageAttributes: for each attribute in
// name order, the name, the data type and the value, each preceded by its
// length as a 4-byte big-endian integer, with a transport-type byte (1 for
// String and Number, 2 for Binary) before the value. "" for no attributes.
func md5OfAttributes(attrs map[string]attrValue) string {
	if len(attrs) == 0 {
		return ""
	}
	h := md5.New()
	field := func(b []byte) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	for _, name := range sortedKeys(attrs) {
		a := attrs[name]
		field([]byte(name))
		field([]byte(a.dataType))
		if a.binary() {
			h.Write([]byte{2})
			field(a.bin)
		} else {
			h.Write([]byte{1})
			field([]byte(a.str))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
