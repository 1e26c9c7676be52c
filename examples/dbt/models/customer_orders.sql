-- One row per current customer: the orders that count (neither cancelled
-- nor refunded), how many of them are still pending, when the last one
-- was placed, and what was spent in euros.
with orders as (
    select customer_id, status, currency, amount, placed_at
    from {{ source('raw', 'orders') }}
    where status not in ('cancelled', 'refunded')
)

select
    c.customer_id,
    c.name,
    c.country,
    count(o.customer_id) as orders,
    count(o.customer_id) filter (where o.status = 'pending') as pending_orders,
    max(o.placed_at) as last_order_at,
    coalesce(sum(o.amount::numeric) filter (where o.currency = 'EUR'), 0)::numeric(14, 2) as spent_eur
from {{ ref('customers_current') }} as c
left join orders as o on o.customer_id = c.customer_id
group by c.customer_id, c.name, c.country
