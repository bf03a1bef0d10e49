package mems3

import (
	"encoding/xml"
	"net/http"
	"sort"
	"strings"
)

// validBucketName applies S3's naming rules for general purpose buckets.
func validBucketName(name string) bool {
	if len(name) < 3 || len(name) > 63 || strings.Contains(name, "..") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		if !alnum && c != '-' && c != '.' {
			return false
		}
		if (i == 0 || i == len(name)-1) && !alnum {
			return false
		}
	}
	return true
}

type createBucketIn struct {
	LocationConstraint string `xml:"LocationConstraint"`
}

func (s *Server) createBucket(rq *request) (*response, *s3Error) {
	if !validBucketName(rq.bucket) {
		return nil, newError(http.StatusBadRequest, "InvalidBucketName", "The specified bucket is not valid.").
			with("BucketName", rq.bucket)
	}
	body, trailers, err := readPayload(rq.r)
	if err != nil {
		return nil, err
	}
	if err := verifyPayload(rq.r.Header, trailers, body); err != nil {
		return nil, err
	}
	region := s.region
	if len(strings.TrimSpace(string(body))) > 0 {
		var in createBucketIn
		if xml.Unmarshal(body, &in) != nil {
			return nil, errMalformedXML()
		}
		switch c := in.LocationConstraint; {
		case c == "us-east-1":
			return nil, newError(http.StatusBadRequest, "InvalidLocationConstraint", "The specified location-constraint is not valid").
				with("LocationConstraint", c)
		case c != "" && c != s.region:
			return nil, newError(http.StatusBadRequest, "IllegalLocationConstraintException",
				"The "+c+" location constraint is incompatible for the region specific endpoint this request was sent to.")
		case c == "" && s.region != "us-east-1":
			return nil, newError(http.StatusBadRequest, "IllegalLocationConstraintException",
				"The unspecified location constraint is incompatible for the region specific endpoint this request was sent to.")
		}
	} else if s.region != "us-east-1" {
		return nil, newError(http.StatusBadRequest, "IllegalLocationConstraintException",
			"The unspecified location constraint is incompatible for the region specific endpoint this request was sent to.")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buckets[rq.bucket] != nil {
		return nil, newError(http.StatusConflict, "BucketAlreadyOwnedByYou",
			"Your previous request to create the named bucket succeeded and you already own it.").with("BucketName", rq.bucket)
	}
	s.buckets[rq.bucket] = &bucket{
		name:    rq.bucket,
		region:  region,
		created: storedTime(s.clock()),
		objects: map[string]*object{},
		uploads: map[string]*upload{},
	}
	resp := newResponse()
	resp.header.Set("Location", "/"+rq.bucket)
	return resp, nil
}

func (s *Server) headBucket(rq *request) (*response, *s3Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	resp := newResponse()
	resp.header.Set("x-amz-bucket-region", b.region)
	return resp, nil
}

func (s *Server) deleteBucket(rq *request) (*response, *s3Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	if len(b.objects) > 0 || len(b.uploads) > 0 {
		return nil, newError(http.StatusConflict, "BucketNotEmpty", "The bucket you tried to delete is not empty").
			with("BucketName", rq.bucket)
	}
	delete(s.buckets, rq.bucket)
	resp := newResponse()
	resp.status = http.StatusNoContent
	return resp, nil
}

type owner struct {
	ID          string `xml:"ID"`
	DisplayName string `xml:"DisplayName"`
}

var theOwner = owner{ID: ownerID, DisplayName: ownerName}

type listBucketsOut struct {
	XMLName xml.Name      `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListAllMyBucketsResult"`
	Owner   owner         `xml:"Owner"`
	Buckets []bucketEntry `xml:"Buckets>Bucket"`
	Prefix  string        `xml:"Prefix,omitempty"`
}

type bucketEntry struct {
	Name         string `xml:"Name"`
	CreationDate string `xml:"CreationDate"`
	BucketRegion string `xml:"BucketRegion"`
}

func (s *Server) listBuckets(rq *request) (*response, *s3Error) {
	prefix := rq.query.Get("prefix")
	s.mu.Lock()
	defer s.mu.Unlock()
	out := listBucketsOut{Owner: theOwner, Prefix: prefix}
	for _, b := range s.buckets {
		if strings.HasPrefix(b.name, prefix) {
			out.Buckets = append(out.Buckets, bucketEntry{Name: b.name, CreationDate: xmlTime(b.created), BucketRegion: b.region})
		}
	}
	sort.Slice(out.Buckets, func(i, j int) bool { return out.Buckets[i].Name < out.Buckets[j].Name })
	return xmlResponse(out), nil
}

type locationOut struct {
	XMLName xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ LocationConstraint"`
	Region  string   `xml:",chardata"`
}

func (s *Server) getBucketLocation(rq *request) (*response, *s3Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	out := locationOut{}
	if b.region != "us-east-1" {
		out.Region = b.region
	}
	return xmlResponse(out), nil
}

type versioningIn struct {
	Status    string `xml:"Status"`
	MfaDelete string `xml:"MfaDelete"`
}

type versioningOut struct {
	XMLName xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ VersioningConfiguration"`
	Status  string   `xml:"Status,omitempty"`
}

func (s *Server) putBucketVersioning(rq *request) (*response, *s3Error) {
	body, trailers, err := readPayload(rq.r)
	if err != nil {
		return nil, err
	}
	if err := verifyPayload(rq.r.Header, trailers, body); err != nil {
		return nil, err
	}
	var in versioningIn
	if xml.Unmarshal(body, &in) != nil {
		return nil, errMalformedXML()
	}
	if in.Status != versioningEnabled && in.Status != versioningSuspended {
		return nil, errMalformedXML()
	}
	if in.MfaDelete == "Enabled" {
		return nil, errNotImplemented("MFA delete")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	b.versioning = in.Status
	return newResponse(), nil
}

func (s *Server) getBucketVersioning(rq *request) (*response, *s3Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	return xmlResponse(versioningOut{Status: b.versioning}), nil
}
