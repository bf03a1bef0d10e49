package awsenv

import "testing"

func TestIsBlockPrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		want   bool
	}{
		{"acme/01ARZ3NDEKTSV4RRFFQ69G5FAV/", true},
		{"blocks/acme/01ARZ3NDEKTSV4RRFFQ69G5FAV/", true},
		{"01ARZ3NDEKTSV4RRFFQ69G5FAV/", true},
		{"acme/01ARZ3NDEKTSV4RRFFQ69G5FAV", false}, // no slash: also matches ...FAVX/
		{"acme/", false},
		{"", false},
		{"acme/not-a-ulid/", false},
		{"acme/01ARZ3NDEKTSV4RRFFQ69G5FAV/chunks/", false},
	} {
		if got := isBlockPrefix(tc.prefix); got != tc.want {
			t.Errorf("isBlockPrefix(%q) = %v, want %v", tc.prefix, got, tc.want)
		}
	}
}
