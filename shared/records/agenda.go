package records

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// AgendaKind is what an agenda entry asks the cleaner's sweep to do.
// The agenda lets a sweep query only what is due instead of scanning.
type AgendaKind string

// Agenda kinds.
const (
	// AgendaDelete: a RETIRING block whose deletion delay ends at Due.
	AgendaDelete AgendaKind = "DEL"
	// AgendaRange: a group range that was not ready; re-plan once it
	// closes at Due, even if no block arrives.
	AgendaRange AgendaKind = "RANGE"
	// AgendaOrphans: a final version whose output keys get a second orphan
	// sweep at Due (a slow losing job may write after the first).
	AgendaOrphans AgendaKind = "ORPHANS"
	// AgendaActive: a group with an unfinished version; the sweep re-drives
	// it whatever its due time.
	AgendaActive AgendaKind = "ACTIVE"
)

// AgendaEntry is one due item: Subject is "<tenant>/<block>" or
// "<tenant>/<group>[@v<v>]".
type AgendaEntry struct {
	Kind    AgendaKind
	Due     time.Time
	Tenant  string
	Subject string
	sk      string
}

// agendaSK sorts entries of one kind by due time (zero-padded ms).
func agendaSK(k AgendaKind, due time.Time, tenant, subject string) string {
	return fmt.Sprintf("%s#%013d#%s#%s", k, due.UnixMilli(), tenant, subject)
}

func agendaItem(k AgendaKind, due time.Time, tenant, subject string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"PK": s(agendaPK), "SK": s(agendaSK(k, due, tenant, subject)),
		"tenant": s(tenant), "subject": s(subject),
	}
}

// PutAgenda adds an entry (idempotent).
func (st *Store) PutAgenda(ctx context.Context, k AgendaKind, due time.Time, tenant, subject string) error {
	return st.retry(ctx, "put agenda", func() error {
		_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(st.table), Item: agendaItem(k, due, tenant, subject),
		})
		return err
	})
}

// Due lists entries of kind k due at or before now.
func (st *Store) Due(ctx context.Context, k AgendaKind, now time.Time) ([]AgendaEntry, error) {
	items, err := st.queryRange(ctx, agendaPK, string(k)+"#", agendaSK(k, now, "\xff", ""))
	if err != nil {
		return nil, err
	}
	out := make([]AgendaEntry, 0, len(items))
	for _, it := range items {
		sk := it["SK"].(*types.AttributeValueMemberS).Value
		parts := strings.SplitN(sk, "#", 4)
		if len(parts) != 4 {
			continue
		}
		var ms int64
		fmt.Sscan(parts[1], &ms)
		out = append(out, AgendaEntry{Kind: k, Due: time.UnixMilli(ms), Tenant: parts[2], Subject: parts[3], sk: sk})
	}
	return out, nil
}

// DoneAgenda removes an entry the sweep has handled.
func (st *Store) DoneAgenda(ctx context.Context, e AgendaEntry) error {
	return st.retry(ctx, "delete agenda", func() error {
		_, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: aws.String(st.table), Key: key(agendaPK, e.sk),
		})
		return err
	})
}
