package mems3_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/sluice-dev/sluice/localstack/memaws/mems3"
)

// listed is one entry of a version listing as a user of S3 sees it.
type listed struct {
	key, id        string
	marker, latest bool
}

func (l listed) String() string {
	kind := "v"
	if l.marker {
		kind = "dm"
	}
	if l.latest {
		kind += "*"
	}
	return l.key + "@" + l.id + "(" + kind + ")"
}

// versionHistory writes keys with several versions and delete markers and
// returns the listing S3 gives: keys in byte order, newest first.
func versionHistory(t *testing.T, f *fixture) (want []listed) {
	t.Helper()
	ctx := t.Context()
	history := map[string][]listed{}
	put := func(key string) {
		out := f.put(t, key, "body of "+key)
		history[key] = append(history[key], listed{key: key, id: aws.ToString(out.VersionId)})
	}
	del := func(key string) {
		out, err := f.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		history[key] = append(history[key], listed{key: key, id: aws.ToString(out.VersionId), marker: true})
	}
	// Interleaved, so creation order and key order differ.
	put("b/2")
	put("a")
	put("b/1")
	put("a")
	del("b/2")
	put("c")
	put("a")
	put("b/2")
	del("a")
	put("é") // sorts after ASCII by UTF-8 bytes
	put("c")
	del("c")
	del("c")
	put("B")
	keys := make([]string, 0, len(history))
	for k := range history {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		h := history[k]
		for i := len(h) - 1; i >= 0; i-- {
			e := h[i]
			e.latest = i == len(h)-1
			want = append(want, e)
		}
	}
	return want
}

func TestListObjectVersionsPagination(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{}, true)
	want := versionHistory(t, f)
	for _, maxKeys := range []int32{1, 2, 3, 1000} {
		t.Run(fmt.Sprint("max-keys=", maxKeys), func(t *testing.T) {
			p := s3.NewListObjectVersionsPaginator(f.c, &s3.ListObjectVersionsInput{Bucket: aws.String(f.bucket), MaxKeys: aws.Int32(maxKeys)})
			pos := 0
			for p.HasMorePages() {
				page, err := p.NextPage(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				versions, markers := pageEntries(page)
				n := len(versions) + len(markers)
				if n > int(maxKeys) || (aws.ToBool(page.IsTruncated) && n != int(maxKeys)) || pos+n > len(want) {
					t.Fatalf("page of %d entries at %d of %d, max-keys %d, truncated %v", n, pos, len(want), maxKeys, aws.ToBool(page.IsTruncated))
				}
				// The SDK splits a page into Versions and DeleteMarkers, each
				// in document order: each must be the next entries of S3's
				// order, of its kind.
				var wantVersions, wantMarkers []listed
				for _, e := range want[pos : pos+n] {
					if e.marker {
						wantMarkers = append(wantMarkers, e)
					} else {
						wantVersions = append(wantVersions, e)
					}
				}
				if !slices.Equal(versions, wantVersions) || !slices.Equal(markers, wantMarkers) {
					t.Fatalf("page at %d: versions %v markers %v, want %v %v", pos, versions, markers, wantVersions, wantMarkers)
				}
				pos += n
			}
			if pos != len(want) {
				t.Fatalf("visited %d entries, want %d: %v", pos, len(want), want)
			}
		})
	}
}

func pageEntries(page *s3.ListObjectVersionsOutput) (versions, markers []listed) {
	for _, v := range page.Versions {
		versions = append(versions, listed{key: aws.ToString(v.Key), id: aws.ToString(v.VersionId), latest: aws.ToBool(v.IsLatest)})
	}
	for _, m := range page.DeleteMarkers {
		markers = append(markers, listed{key: aws.ToString(m.Key), id: aws.ToString(m.VersionId), marker: true, latest: aws.ToBool(m.IsLatest)})
	}
	return versions, markers
}

func TestListObjectVersionsDelimiter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{}, true)
	versionHistory(t, f)
	for _, maxKeys := range []int32{1, 2, 1000} {
		p := s3.NewListObjectVersionsPaginator(f.c, &s3.ListObjectVersionsInput{
			Bucket: aws.String(f.bucket), Delimiter: aws.String("/"), MaxKeys: aws.Int32(maxKeys),
		})
		var prefixes, keys []string
		for p.HasMorePages() {
			page, err := p.NextPage(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			for _, cp := range page.CommonPrefixes {
				prefixes = append(prefixes, aws.ToString(cp.Prefix))
			}
			versions, markers := pageEntries(page)
			for _, e := range append(versions, markers...) {
				keys = append(keys, e.key)
			}
		}
		if want := []string{"b/"}; !slices.Equal(prefixes, want) {
			t.Fatalf("max-keys %d: common prefixes %v, want %v", maxKeys, prefixes, want)
		}
		slices.Sort(keys)
		if want := []string{"B", "a", "a", "a", "a", "c", "c", "c", "c", "é"}; !slices.Equal(keys, want) {
			t.Fatalf("max-keys %d: keys %v, want %v", maxKeys, keys, want)
		}
	}
}

func TestListObjectsV2(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{}, true)
	for _, k := range []string{"a/1", "a/2", "b/x/1", "b/y", "c", "d/", "e f", "gone"} {
		f.put(t, k, k)
	}
	if _, err := f.c.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("gone")}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		prefix, delimiter string
		keys, prefixes    []string
	}{
		{"", "", []string{"a/1", "a/2", "b/x/1", "b/y", "c", "d/", "e f"}, nil},
		{"", "/", []string{"c", "e f"}, []string{"a/", "b/", "d/"}},
		{"b/", "/", []string{"b/y"}, []string{"b/x/"}},
		{"a", "", []string{"a/1", "a/2"}, nil},
		{"zzz", "/", nil, nil},
	}
	for _, c := range cases {
		for _, maxKeys := range []int32{1, 2, 1000} {
			p := s3.NewListObjectsV2Paginator(f.c, &s3.ListObjectsV2Input{
				Bucket: aws.String(f.bucket), Prefix: aws.String(c.prefix), Delimiter: aws.String(c.delimiter), MaxKeys: aws.Int32(maxKeys),
			})
			var keys, prefixes []string
			for p.HasMorePages() {
				page, err := p.NextPage(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if int(aws.ToInt32(page.KeyCount)) != len(page.Contents)+len(page.CommonPrefixes) {
					t.Fatalf("KeyCount %d for %d entries", aws.ToInt32(page.KeyCount), len(page.Contents)+len(page.CommonPrefixes))
				}
				for _, o := range page.Contents {
					keys = append(keys, aws.ToString(o.Key))
				}
				for _, cp := range page.CommonPrefixes {
					prefixes = append(prefixes, aws.ToString(cp.Prefix))
				}
			}
			if !slices.Equal(keys, c.keys) || !slices.Equal(prefixes, c.prefixes) {
				t.Fatalf("prefix %q delimiter %q max-keys %d: keys %v prefixes %v, want %v %v",
					c.prefix, c.delimiter, maxKeys, keys, prefixes, c.keys, c.prefixes)
			}
		}
	}

	after, err := f.c.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(f.bucket), StartAfter: aws.String("b/y")})
	if err != nil || len(after.Contents) != 3 || aws.ToString(after.Contents[0].Key) != "c" {
		t.Fatalf("start-after: %v %+v", err, after.Contents)
	}
	enc, err := f.c.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(f.bucket), Prefix: aws.String("e"), EncodingType: s3types.EncodingTypeUrl})
	if err != nil || len(enc.Contents) != 1 || aws.ToString(enc.Contents[0].Key) != "e+f" {
		t.Fatalf("encoding-type=url: %v %+v", err, enc.Contents)
	}
	v1, err := f.c.ListObjects(t.Context(), &s3.ListObjectsInput{Bucket: aws.String(f.bucket), Delimiter: aws.String("/"), MaxKeys: aws.Int32(2)})
	if err != nil || !aws.ToBool(v1.IsTruncated) || aws.ToString(v1.NextMarker) != "b/" {
		t.Fatalf("ListObjects: %v %+v", err, v1)
	}
	v1, err = f.c.ListObjects(t.Context(), &s3.ListObjectsInput{Bucket: aws.String(f.bucket), Delimiter: aws.String("/"), Marker: v1.NextMarker})
	if err != nil || len(v1.Contents) != 2 || len(v1.CommonPrefixes) != 1 || aws.ToString(v1.CommonPrefixes[0].Prefix) != "d/" {
		t.Fatalf("ListObjects from marker b/: %v %+v", err, v1)
	}
}
