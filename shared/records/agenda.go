package records

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-dev/sluice/shared/awslimits"
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
	// it whatever its due time, once it has had the time to advance on its
	// own (AgendaEntry.Since).
	AgendaActive AgendaKind = "ACTIVE"
)

// AgendaEntry is one due item: Subject is "<tenant>/<block>" or
// "<tenant>/<group>[@v<v>]".
type AgendaEntry struct {
	Kind    AgendaKind
	Due     time.Time
	Tenant  string
	Subject string
	// Since is when an ACTIVE entry's version was created (zero for an
	// entry of an earlier release): the sweep leaves a version alone
	// while its jobs and notes may still be on their way.
	Since  time.Time
	pk, sk string
}

// AgendaShards is how many partition keys the agenda is spread over
// (AGENDA#0 … AGENDA#3), so that thousands of tenants' entries are not
// one hot key; an entry's shard is a hash of its tenant and subject. A
// sweep reads each shard with one Query for every kind at once, since the
// sort key starts with the due time. Changing the count moves entries'
// keys: an upgrade that does must carry the old ones over, as DueAll does
// for the unsharded agenda of earlier releases.
const AgendaShards = 4

// legacyAgendaPK is the one partition earlier releases kept the agenda
// under, with the kind first in the sort key: <KIND>#<due>#<tenant>#<subject>.
const legacyAgendaPK = "AGENDA"

func agendaShard(tenant, subject string) string {
	h := fnv.New32a()
	h.Write([]byte(tenant))
	h.Write([]byte{'/'})
	h.Write([]byte(subject))
	return fmt.Sprintf("%s#%d", legacyAgendaPK, h.Sum32()%AgendaShards)
}

// agendaSK sorts a shard's entries by due time (zero-padded ms), then kind.
func agendaSK(k AgendaKind, due time.Time, tenant, subject string) string {
	return fmt.Sprintf("%013d#%s#%s#%s", due.UnixMilli(), k, tenant, subject)
}

// agendaKey is the key of an entry.
func agendaKey(k AgendaKind, due time.Time, tenant, subject string) map[string]types.AttributeValue {
	return key(agendaShard(tenant, subject), agendaSK(k, due, tenant, subject))
}

// legacyAgendaKey is where an earlier release kept the same entry.
func legacyAgendaKey(k AgendaKind, due time.Time, tenant, subject string) map[string]types.AttributeValue {
	return key(legacyAgendaPK, fmt.Sprintf("%s#%013d#%s#%s", k, due.UnixMilli(), tenant, subject))
}

func agendaItem(k AgendaKind, due time.Time, tenant, subject string) map[string]types.AttributeValue {
	it := agendaKey(k, due, tenant, subject)
	it["tenant"], it["subject"] = s(tenant), s(subject)
	return it
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

// DueAll lists the entries of every kind due at or before now: one Query
// per shard (ACTIVE entries, due at 0, come first in each). Until this
// store has once found the unsharded agenda of an earlier release empty,
// it reads that too, so an upgrade loses no entry; DoneAgendaAll removes
// such an entry where it is.
func (st *Store) DueAll(ctx context.Context, now time.Time) ([]AgendaEntry, error) {
	upTo := fmt.Sprintf("%013d#\xff", now.UnixMilli())
	var out []AgendaEntry
	for i := range AgendaShards {
		pk := fmt.Sprintf("%s#%d", legacyAgendaPK, i)
		items, err := st.queryRange(ctx, pk, "0", upTo)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			if e, ok := parseAgendaItem(pk, it); ok {
				out = append(out, e)
			}
		}
	}
	if !st.legacyAgendaEmpty.Load() {
		legacy, err := st.legacyDue(ctx, now)
		if err != nil {
			return nil, err
		}
		out = append(out, legacy...)
	}
	// As one partition ordered them: by due time, then tenant and
	// subject, whatever their shards (the sweep handles a kind's entries
	// in this order).
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.Due.Equal(b.Due) {
			return a.Due.Before(b.Due)
		}
		return a.Tenant+"#"+a.Subject < b.Tenant+"#"+b.Subject
	})
	return out, nil
}

// legacyDue reads the due entries an earlier release left under its one
// agenda key, and remembers when there are none left.
func (st *Store) legacyDue(ctx context.Context, now time.Time) ([]AgendaEntry, error) {
	items, err := st.query(ctx, legacyAgendaPK, "")
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		st.legacyAgendaEmpty.Store(true)
	}
	var out []AgendaEntry
	for _, it := range items {
		if e, ok := parseAgendaItem(legacyAgendaPK, it); ok && !e.Due.After(now) {
			out = append(out, e)
		}
	}
	return out, nil
}

// parseAgendaItem reads an entry back from its key: <due>#<KIND>#… in a
// shard, <KIND>#<due>#… under the earlier releases' one key.
func parseAgendaItem(pk string, it map[string]types.AttributeValue) (AgendaEntry, bool) {
	skv, _ := it["SK"].(*types.AttributeValueMemberS)
	if skv == nil {
		return AgendaEntry{}, false
	}
	parts := strings.SplitN(skv.Value, "#", 4)
	if len(parts) != 4 {
		return AgendaEntry{}, false
	}
	due, kind := parts[0], parts[1]
	if pk == legacyAgendaPK {
		due, kind = parts[1], parts[0]
	}
	ms, err := strconv.ParseInt(due, 10, 64)
	if err != nil {
		return AgendaEntry{}, false
	}
	e := AgendaEntry{Kind: AgendaKind(kind), Due: time.UnixMilli(ms), Tenant: parts[2], Subject: parts[3], pk: pk, sk: skv.Value}
	if v, ok := it["since"].(*types.AttributeValueMemberN); ok {
		if since, err := strconv.ParseInt(v.Value, 10, 64); err == nil {
			e.Since = time.UnixMilli(since)
		}
	}
	return e, true
}

// ByKind splits entries by kind, each kind's in the order given.
func ByKind(entries []AgendaEntry) map[AgendaKind][]AgendaEntry {
	out := map[AgendaKind][]AgendaEntry{}
	for _, e := range entries {
		out[e.Kind] = append(out[e.Kind], e)
	}
	return out
}

// Due lists the entries of kind k due at or before now. It reads every
// shard: a caller wanting several kinds reads DueAll once.
func (st *Store) Due(ctx context.Context, k AgendaKind, now time.Time) ([]AgendaEntry, error) {
	all, err := st.DueAll(ctx, now)
	if err != nil {
		return nil, err
	}
	return ByKind(all)[k], nil
}

// DoneAgendaAll removes entries the sweep has handled, 25 to a
// BatchWriteItem request (an entry is no protocol item: its delete needs
// no condition), and retries what DynamoDB leaves unprocessed.
func (st *Store) DoneAgendaAll(ctx context.Context, entries []AgendaEntry) error {
	for start := 0; start < len(entries); start += awslimits.MaxBatchWriteItems {
		var reqs []types.WriteRequest
		for _, e := range entries[start:min(start+awslimits.MaxBatchWriteItems, len(entries))] {
			reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: key(e.pk, e.sk)}})
		}
		for attempt := 0; len(reqs) > 0; attempt++ {
			if attempt > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Duration(50<<min(attempt, 6)) * time.Millisecond):
				}
			}
			if attempt > 10 {
				return fmt.Errorf("delete %d agenda entries: still unprocessed after %d attempts", len(reqs), attempt)
			}
			var out *dynamodb.BatchWriteItemOutput
			err := st.retry(ctx, "delete agenda entries", func() error {
				var err error
				out, err = st.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{st.table: reqs}})
				return err
			})
			if err != nil {
				return err
			}
			reqs = out.UnprocessedItems[st.table]
		}
	}
	return nil
}
