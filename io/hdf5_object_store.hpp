// HDF5 files in an object store, read through moerun's own S3 client: a read-only HDF5 virtual
// file driver whose reads are ranged GETs of io::ObjectStore. Every read therefore has what the
// client gives expert reads (--s3-timeout, --s3-retries with backoff, a body of the wrong length
// refused, errors as one line naming the s3:// URL), which HDF5's ros3 driver does not: its reads
// are not retried, not bounded in time, and a server that ignores Range crashed it. Small reads
// (metadata) go through a page cache, so walking a file's metadata takes few round trips.
#pragma once
#include "io/hdf5.hpp"
#include "io/object_store.hpp"

namespace moerun::io {

// Opens `url` read-only. The store must outlive the handle. A missing object or a failed request
// is the store's own error (Io naming the URL); a file that is not HDF5 is BadInput naming it.
H5Handle h5_open_object_store_file(const ObjectStore& store, const S3Url& url);

}  // namespace moerun::io
