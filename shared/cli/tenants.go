package cli

import (
	"context"
	"sort"

	"github.com/sluice-dev/sluice/shared/records"
)

// listTenants lists every tenant that registered a block, sorted.
func listTenants(ctx context.Context, st *records.Store) ([]string, error) {
	ts, err := st.Tenants(ctx)
	if err != nil {
		return nil, err
	}
	sort.Strings(ts)
	return ts, nil
}
