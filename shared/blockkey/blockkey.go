// Package blockkey maps S3 object keys to blocks and back: the bucket layout
// of docs/design.md §1, which Thanos, Cortex and Mimir share.
//
//	[<prefix>/]<tenant>/<ULID>/<file>     multi-tenant (Cortex, Mimir)
//	[<prefix>/]<ULID>/<file>              Thanos single-tenant bucket
//
// A single-tenant bucket is a configuration choice, not a fork: the tenant
// name comes from the Layout, and everything downstream (records, FIFO group
// ids) sees a tenant either way.
//
// Parsing is strict so that a key and its Key round-trip exactly: the object
// Sluice reads, writes or deletes is always the one the event named. A key
// that does not fit (a Cortex bucket index, a global marker, a lowercase
// ULID) is rejected with ErrOutsideLayout, which callers skip.
package blockkey

import (
	"errors"
	"fmt"
	"strings"

	"github.com/oklog/ulid/v2"
)

// Well-known files of a block directory.
const (
	MetaFile          = "meta.json"
	IndexFile         = "index"
	ChunksDir         = "chunks"
	TombstonesFile    = "tombstones"
	DeletionMarkFile  = "deletion-mark.json"
	NoCompactMarkFile = "no-compact-mark.json"
)

// MaxTenantLength is the longest tenant id Cortex and Mimir accept.
const MaxTenantLength = 150

var (
	// ErrOutsideLayout is wrapped by every error about a key that is not a
	// block file of the layout.
	ErrOutsideLayout = errors.New("key outside the block layout")
	// ErrInvalidTenant is wrapped by every error about a tenant id that
	// Cortex would reject.
	ErrInvalidTenant = errors.New("invalid tenant id")
)

// Layout says where blocks live in the bucket. The zero value is a
// multi-tenant bucket with blocks at the root.
type Layout struct {
	// Prefix is an optional key prefix under which the layout starts, e.g.
	// "blocks"; leading and trailing slashes are ignored.
	Prefix string
	// SingleTenant, when non-empty, makes this a Thanos single-tenant bucket
	// (<ULID>/... under Prefix) whose blocks belong to this tenant.
	SingleTenant string
}

// Validate reports whether the layout itself is usable.
func (l Layout) Validate() error {
	if l.SingleTenant != "" {
		if err := ValidateTenant(l.SingleTenant); err != nil {
			return fmt.Errorf("layout single tenant: %w", err)
		}
	}
	if p := l.prefix(); p != "" {
		for seg := range strings.SplitSeq(p, "/") {
			if seg == "" || seg == "." || seg == ".." {
				return fmt.Errorf("layout prefix %q: empty, %q or %q segment", l.Prefix, ".", "..")
			}
		}
	}
	return nil
}

// prefix is Prefix without leading and trailing slashes.
func (l Layout) prefix() string { return strings.Trim(l.Prefix, "/") }

// root is what every key of the layout starts with: "" or "<prefix>/".
func (l Layout) root() string {
	if p := l.prefix(); p != "" {
		return p + "/"
	}
	return ""
}

// TenantPrefix is the key prefix under which tenant's blocks live ("" for
// every tenant: the layout's root). It is what `sluice adopt` lists, the
// one LIST wider than a block that Sluice makes, and only on request.
func (l Layout) TenantPrefix(tenant string) string {
	if tenant == "" || l.SingleTenant != "" {
		return l.root()
	}
	return l.root() + tenant + "/"
}

// markersDir holds a tenant's global markers in a Cortex or Mimir bucket.
const markersDir = "markers/"

// GlobalMarker is the key of block id's global marker file (a deletion or
// no-compact mark) in a Cortex or Mimir bucket: <tenant>/markers/<ULID>-<file>.
func (l Layout) GlobalMarker(tenant, id, file string) string {
	return l.TenantPrefix(tenant) + markersDir + id + "-" + file
}

// IsGlobalMarker reports whether key is a tenant's global marker (as
// GlobalMarker names them, whoever wrote it): an object the bucket
// notifies (it ends in -mark.json) that is no block's file.
func (l Layout) IsGlobalMarker(key string) bool {
	rest, ok := strings.CutPrefix(key, l.root())
	if !ok || l.SingleTenant != "" {
		return false
	}
	tenant, rest, ok := strings.Cut(rest, "/")
	name, isMarker := strings.CutPrefix(rest, markersDir)
	return ok && tenant != "" && isMarker && name != "" && !strings.Contains(name, "/")
}

// Block returns the key of block id of tenant (File empty). In a
// single-tenant layout, tenant must be empty or the layout's tenant.
func (l Layout) Block(tenant string, id ulid.ULID) (Key, error) {
	if err := l.Validate(); err != nil {
		return Key{}, err
	}
	if l.SingleTenant != "" {
		if tenant != "" && tenant != l.SingleTenant {
			return Key{}, fmt.Errorf("block %s: tenant %q in single-tenant layout of %q", id, tenant, l.SingleTenant)
		}
		tenant = l.SingleTenant
	}
	if err := ValidateTenant(tenant); err != nil {
		return Key{}, fmt.Errorf("block %s: %w", id, err)
	}
	return Key{Tenant: tenant, Block: id, Layout: l}, nil
}

// Key is one object of one block.
type Key struct {
	Tenant string
	Block  ulid.ULID
	// File is the path inside the block directory: "meta.json", "index",
	// "chunks/000001", "deletion-mark.json", ... Empty for a Key that names
	// the block as a whole (Layout.Block).
	File string
	// Layout is the layout the key belongs to; BlockPrefix and Object
	// build keys in it.
	Layout Layout
}

// BlockPrefix is the key prefix of the block's directory, ending in "/":
// the only prefix Sluice ever lists (docs/design.md §4, request economy).
func (k Key) BlockPrefix() string {
	if k.Layout.SingleTenant != "" {
		return k.Layout.root() + k.Block.String() + "/"
	}
	return k.Layout.root() + k.Tenant + "/" + k.Block.String() + "/"
}

// Object is the key of file inside the block's directory.
func (k Key) Object(file string) string { return k.BlockPrefix() + file }

// String is the object key that Parse read, or the block prefix when File is
// empty.
func (k Key) String() string { return k.Object(k.File) }

// BlockKey is "<tenant>/<ULID>": the block's identity across layouts, and
// the MessageGroupId of its block ops (docs/design.md §2).
func (k Key) BlockKey() string { return k.Tenant + "/" + k.Block.String() }

// Parse maps an object key to the block file it names.
func Parse(key string, l Layout) (Key, error) {
	if err := l.Validate(); err != nil {
		return Key{}, err
	}
	rest, ok := strings.CutPrefix(key, l.root())
	if !ok {
		return Key{}, fmt.Errorf("key %q: %w: not under prefix %q", key, ErrOutsideLayout, l.root())
	}
	k := Key{Layout: l}
	if l.SingleTenant != "" {
		k.Tenant = l.SingleTenant
	} else {
		tenant, after, ok := strings.Cut(rest, "/")
		if !ok {
			return Key{}, fmt.Errorf("key %q: %w: want <tenant>/<ULID>/<file>", key, ErrOutsideLayout)
		}
		if err := ValidateTenant(tenant); err != nil {
			return Key{}, fmt.Errorf("key %q: %w: %w", key, ErrOutsideLayout, err)
		}
		k.Tenant, rest = tenant, after
	}
	id, file, ok := strings.Cut(rest, "/")
	if !ok {
		return Key{}, fmt.Errorf("key %q: %w: want <ULID>/<file> after the tenant", key, ErrOutsideLayout)
	}
	u, err := ulid.ParseStrict(id)
	if err != nil {
		return Key{}, fmt.Errorf("key %q: %w: block id %q: %w", key, ErrOutsideLayout, id, err)
	}
	if u.String() != id {
		// ULIDs are case-insensitive, object keys are not: a lowercase
		// directory is not the block whose key we would build.
		return Key{}, fmt.Errorf("key %q: %w: block id %q is not in canonical (upper) case", key, ErrOutsideLayout, id)
	}
	if err := validateFile(file); err != nil {
		return Key{}, fmt.Errorf("key %q: %w: %w", key, ErrOutsideLayout, err)
	}
	k.Block, k.File = u, file
	return k, nil
}

// validateFile accepts a relative path of non-empty segments other than "."
// and "..".
func validateFile(file string) error {
	if file == "" {
		return errors.New("no file after the block id")
	}
	for seg := range strings.SplitSeq(file, "/") {
		switch seg {
		case "":
			return fmt.Errorf("file %q has an empty path segment", file)
		case ".", "..":
			return fmt.Errorf("file %q has a %q path segment", file, seg)
		}
	}
	return nil
}

// ValidateTenant accepts exactly the tenant ids Cortex and Mimir accept:
// 1 to 150 characters from [a-zA-Z0-9] and !-_.*'(), other than "." and "..".
func ValidateTenant(tenant string) error {
	switch {
	case tenant == "":
		return fmt.Errorf("%w: empty", ErrInvalidTenant)
	case len(tenant) > MaxTenantLength:
		return fmt.Errorf("%w: %d characters, at most %d", ErrInvalidTenant, len(tenant), MaxTenantLength)
	case tenant == "." || tenant == "..":
		return fmt.Errorf("%w: %q", ErrInvalidTenant, tenant)
	}
	for i := 0; i < len(tenant); i++ {
		if !tenantChar(tenant[i]) {
			return fmt.Errorf("%w: %q: character %q at %d", ErrInvalidTenant, tenant, tenant[i], i)
		}
	}
	return nil
}

func tenantChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '-', '_', '.', '*', '\'', '(', ')':
		return true
	}
	return false
}
