"""The staff pages beside the admin: the dashboard, the usage page, versions, and the sample input form."""
