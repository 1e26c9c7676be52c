-- The customers as they are now. The sync merges every change into
-- raw.customers by id, so each customer has one row, its latest version;
-- a deleted one stays, marked _openetl_deleted.
select
    id as customer_id,
    name,
    email,
    country,
    vip,
    signup
from {{ source('raw', 'customers') }}
where not _openetl_deleted
